/*
 * wiki_int.h - private to the passage index (wiki_build.c, wiki_index.c): table names and the
 * frequent-term thresholds that the build and the queries must agree on.
 *
 * An index holds one or more FTS5 shards with identical settings: `passages` (shard 0) and
 * `passages_1` ... `passages_<n-1>`. Shards are built in parallel and queried one after the
 * other with statistics summed over all of them, so scores equal a one-table index's.
 */
#ifndef AF_TOOLS_WIKI_INT_H
#define AF_TOOLS_WIKI_INT_H

#define WIKI_TABLE "passages"
#define WIKI_COMMON WIKI_TABLE "_common"
#define WIKI_MAX_SHARDS 16
#define WIKI_FTS_ARGS "id UNINDEXED, title, text, tokenize = 'unicode61 remove_diacritics 2'"

/* Build: terms in more than 1/COMMON_KEEP_DIV of the passages go into WIKI_COMMON.
 * Query: a word in more than 1/COMMON_DROP_DIV of them is dropped from the OR query when
 * rarer words remain (its BM25 weight is small, and its posting list costs the most). */
#define COMMON_KEEP_DIV 200
#define COMMON_DROP_DIV 100
#define COMMON_MIN_DOCS 1000 /* smaller indexes keep every word */

#endif
