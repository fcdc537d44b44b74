#!/usr/bin/env python3
"""fake_mcp_server.py - a small MCP server (stdio, newline-delimited JSON-RPC 2.0) for test_mcp.

Usage: fake_mcp_server.py [MODE]
  (none)      a working server: initialize, tools/list in two pages, tools/call
  exit        exits with status 3 before reading anything
  garbage     answers initialize with a line that is not JSON
  hang        reads requests but never answers
  dup         lists the same tool name twice
  clash       lists a tool named Web_Search_Tool
  http FILE   the streamable HTTP transport on 127.0.0.1 (a free port, written to FILE):
              POST /mcp answers JSON, or an SSE stream for tools/call; Mcp-Session-Id kept
Tools: echo {text}, add {a, b: integer} (structuredContent), fail (isError), rpc_error
(a JSON-RPC error), big {n} (n bytes of text), sleep {seconds}, crash (exits mid-call),
pings (how many replies to its ping requests it has seen), chatty (sends a ping request and
a notification before its reply).
"""
import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
PINGS = {"n": 0}
OUT = None  # in http mode: the messages of the current POST

TOOLS = [
    {"name": "echo", "description": "Echoes its text.",
     "inputSchema": {"type": "object", "properties": {
         "text": {"type": "string", "description": "what to echo"},
         "times": {"type": "integer", "default": 1, "minimum": 1, "maximum": 5}},
         "required": ["text"]}},
    {"name": "add", "description": "Adds two integers.",
     "inputSchema": {"type": "object", "properties": {
         "a": {"type": "integer"}, "b": {"type": "integer"},
         "mode": {"type": "string", "enum": ["plain", "verbose"]},
         "tags": {"type": "array", "items": {"type": "string"}},
         "opts": {"type": "object", "properties": {"x": {"type": "number"}},
                  "required": ["x"], "additionalProperties": False}},
         "required": ["a", "b"]}},
    {"name": "fail", "description": "Always reports a tool error.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "rpc_error", "description": "Answers with a JSON-RPC error.",
     "inputSchema": {"type": "object"}},
    {"name": "big", "description": "Returns n bytes of text.",
     "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                     "required": ["n"]}},
    {"name": "sleep", "description": "Sleeps before answering.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
    {"name": "crash", "description": "Exits in the middle of the call.",
     "inputSchema": {"type": "object"}},
    {"name": "pings", "description": "Counts answered pings.",
     "inputSchema": {"type": "object"}},
    {"name": "chatty", "description": "Pings the client and notifies before answering.",
     "inputSchema": {"type": "object", "properties": {"value": {"type": ["string", "null"]}}}},
]


def send(obj):
    if OUT is not None:
        OUT.append(obj)
        return
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(t, is_error=False, **extra):
    r = {"content": [{"type": "text", "text": t}], "isError": is_error}
    r.update(extra)
    return r


def call(name, args, rid):
    if name == "echo":
        return text(" ".join([args["text"]] * int(args.get("times", 1))))
    if name == "add":
        s = args["a"] + args["b"]
        return text(str(s), structuredContent={"sum": s})
    if name == "fail":
        return text("it went wrong", True)
    if name == "big":
        return text("x" * int(args["n"]))
    if name == "sleep":
        time.sleep(float(args.get("seconds", 3600)))
        return text("woke")
    if name == "crash":
        os._exit(7)
    if name == "pings":
        return text(str(PINGS["n"]))
    if name == "chatty":
        send({"jsonrpc": "2.0", "id": "srv-%d" % rid, "method": "ping"})
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "hello"}})
        send({"jsonrpc": "2.0", "id": 999999, "result": {}})  # a stray reply
        return {"content": [{"type": "text", "text": "one"},
                            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                            {"type": "text", "text": "two"}]}
    return None


def handle(msg):
    method, rid = msg.get("method"), msg.get("id")
    if method is None:
        if isinstance(rid, str) and rid.startswith("srv-") and "result" in msg:
            PINGS["n"] += 1
        return
    if rid is None:
        return  # a notification
    if MODE == "hang":
        return
    if method == "initialize":
        if MODE == "garbage":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            return
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake-mcp", "version": "0.1.0"}}})
    elif method == "tools/list":
        if MODE == "dup":
            tools, nxt = [TOOLS[0], TOOLS[0]], None
        elif MODE == "clash":
            tools, nxt = [dict(TOOLS[0], name="Web_Search_Tool")], None
        elif (msg.get("params") or {}).get("cursor") == "page2":
            tools, nxt = TOOLS[4:], None
        else:
            tools, nxt = TOOLS[:4], "page2"
        res = {"tools": tools}
        if nxt:
            res["nextCursor"] = nxt
        send({"jsonrpc": "2.0", "id": rid, "result": res})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "rpc_error":
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32602, "message": "bad params for rpc_error"}})
            return
        r = call(name, msg["params"].get("arguments") or {}, rid)
        if r is None:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": "unknown tool " + name}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": r})
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "no method " + method}})


def serve_http(port_file):
    from http.server import BaseHTTPRequestHandler, HTTPServer
    session = "sess-42"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, code, ctype, body, headers=()):
            data = body.encode()
            self.send_response(code)
            if ctype:
                self.send_header("Content-Type", ctype)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_DELETE(self):
            self.reply(200 if self.headers.get("Mcp-Session-Id") == session else 404, None, "")

        def do_POST(self):
            global OUT
            msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            accept = self.headers.get("Accept", "")
            if "application/json" not in accept or "text/event-stream" not in accept:
                return self.reply(406, "text/plain", "bad Accept")
            init = msg.get("method") == "initialize"
            if not init and self.headers.get("Mcp-Session-Id") != session:
                return self.reply(400, "application/json", json.dumps(
                    {"jsonrpc": "2.0", "id": msg.get("id"),
                     "error": {"code": -32000, "message": "no valid session id"}}))
            if "id" not in msg:
                return self.reply(202, None, "")
            OUT = []
            handle(msg)
            out, OUT = OUT, None
            hdrs = [("Mcp-Session-Id", session)] if init else []
            if msg.get("method") == "tools/call":
                note = {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 1, "progress": 1}}
                events = "".join("event: message\r\ndata: %s\r\n\r\n" % json.dumps(m)
                                 for m in [note] + out)
                return self.reply(200, "text/event-stream", events, hdrs)
            self.reply(200, "application/json", json.dumps(out[-1]), hdrs)

    import threading

    parent = os.getppid()

    def watch_parent():  # a failed test must not leave this server behind
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    server = HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


def main():
    if MODE == "http":
        serve_http(sys.argv[2])
        return
    if MODE == "exit":
        sys.stderr.write("fake_mcp_server: exiting at start as asked\n")
        sys.exit(3)
    for line in sys.stdin:
        line = line.strip()
        if line:
            handle(json.loads(line))


if __name__ == "__main__":
    main()
