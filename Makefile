# agentflow - one GNU Makefile (see docs/ARCHITECTURE.md).
#   make [MODE=debug|release|asan]   build/agentflow and build/libagentflow.a
#   make test                        build and run every cmocka test
#   make asan                        the same tests under AddressSanitizer + UBSan
#   make lint | format | bench | fuzz [FUZZ_SECONDS=30] | clean
#   V=1                              print each full compiler command, not "CC file"

MODE ?= release
CC ?= cc
ifeq ($(origin CC),default)
CC := gcc
endif

PKGS := jansson libcurl libmicrohttpd sqlite3 zlib libpcre2-8 libxml-2.0 openblas libseccomp
# OpenMPI for `mpirun ... train grpo` (src/train/dist.c); without it the trainer is one rank.
MPI_PKG := $(shell pkg-config --exists ompi-c 2>/dev/null && echo ompi-c)
ifneq ($(MPI_PKG),)
PKGS += $(MPI_PKG)
MPI_DEF := -DAF_HAVE_MPI
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wcast-qual -Wwrite-strings -Wundef -Wformat=2 -Wvla \
        -Wdouble-promotion -Wfloat-conversion -Wimplicit-fallthrough
ifeq ($(CI),true)
WARN += -Werror
endif

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -DAF_HAVE_CBLAS $(MPI_DEF) -pthread -fopenmp $(WARN) -Iinclude -Isrc $(PKG_CFLAGS) -MMD -MP
ifeq ($(MODE),debug)
CFLAGS_MODE := -O0 -g3
else ifeq ($(MODE),asan)
CFLAGS_MODE := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDFLAGS_MODE := -fsanitize=address,undefined
else
CFLAGS_MODE := -O2 -g
endif
CFLAGS_ALL := $(CFLAGS_BASE) $(CFLAGS_MODE) $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -lm -pthread -fopenmp $(LDLIBS)

# One short line per step ("CC src/core/buf.c"); V=1 prints the full commands instead.
V ?= 0
ifeq ($(V),1)
Q :=
say := @true
else
Q := @
say := @printf '  %-4s %s\n'
endif

B := build/$(MODE)
LIB_SRC := $(filter-out src/cli/%,$(wildcard src/*/*.c))
CLI_SRC := $(wildcard src/cli/*.c)
PROMPTS := $(sort $(wildcard prompts/*.txt prompts/*/*.txt))
GEN_PROMPTS := $(B)/gen/prompts_data.c
# The page of `agentflow serve` (src/serve/web/), compiled in like the prompts.
WEB := $(sort $(wildcard src/serve/web/*))
GEN_WEB := $(B)/gen/web_data.c
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/prompts_data.o $(B)/gen/web_data.o
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
TEST_SUPPORT_SRC := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT_SRC:%.c=$(B)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(B)/bench/%)

LIBA := $(B)/libagentflow.a
CLI := $(B)/agentflow

.SECONDARY: $(TEST_SUPPORT_OBJ)
.PHONY: all test asan lint format bench fuzz clean model planner reproduce repair
all: $(CLI) $(LIBA) build/agentflow build/libagentflow.a

# Stable paths for users and scripts, whatever the MODE.
build/agentflow: $(CLI)
	@ln -sf $(MODE)/agentflow $@
build/libagentflow.a: $(LIBA)
	@ln -sf $(MODE)/libagentflow.a $@

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(B)/embed: scripts/embed.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) -std=c11 -O1 -Wall -Wextra $< -o $@

$(GEN_PROMPTS): $(PROMPTS) $(B)/embed
	@mkdir -p $(dir $@)
	$(say) GEN $@
	$(Q)$(B)/embed $@ $(PROMPTS)

$(B)/gen/prompts_data.o: $(GEN_PROMPTS)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(GEN_WEB): $(WEB) $(B)/embed
	@mkdir -p $(dir $@)
	$(B)/embed --header serve/web_data.h --type af_web_file --symbol af_web_files $@ $(WEB)

$(B)/gen/web_data.o: $(GEN_WEB)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	$(say) AR $@
	$(Q)ar rcs $@ $^

$(CLI): $(CLI_OBJ) $(LIBA)
	$(say) LD $@
	$(Q)$(CC) $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIBA) $(LDLIBS_ALL)

$(B)/tests/%: tests/%.c $(TEST_SUPPORT_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	$(say) CCLD $<
	$(Q)$(CC) $(CFLAGS_ALL) -Itests $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIBA) $(LDLIBS_ALL) $(CMOCKA_LIBS)

$(B)/tests/support/%.o: tests/support/%.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS_ALL) -Itests -c $< -o $@

$(B)/bench/%: bench/%.c $(TEST_SUPPORT_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	$(say) CCLD $<
	$(Q)$(CC) $(CFLAGS_ALL) -Itests $(LDFLAGS_MODE) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIBA) $(LDLIBS_ALL)

# Each test binary runs with AGENTFLOW_BIN pointing at the CLI for end-to-end tests. The
# benchmarks are built too (not run), so an API change cannot leave them broken.
test: $(TEST_BIN) $(CLI) $(BENCH_BIN)
	@AGENTFLOW_BIN=$(abspath $(CLI)) AGENTFLOW_SRC=$(CURDIR) sh tests/run_all.sh $(TEST_BIN)

asan:
	$(MAKE) MODE=asan test

bench: $(BENCH_BIN) $(CLI)

FORMAT_SRC := $(shell git ls-files '*.c' '*.h' 2>/dev/null)
# The embedded model from nothing (scripts/make-model.sh; hours on 2 cores, docs/WORLD.md).
model: all
	./scripts/make-model.sh

# Only the recipe's last phase, Flow-GRPO on the planner, from the shipped
# models/agentflow-world.gguf: models/agentflow-world-planner.gguf (minutes, not hours).
planner: all
	STAGE=planner ./scripts/make-model.sh

# docs/REPRODUCTION.md's tables: (a) SFT, (b) + Flow-GRPO, (c) + offline SFT, 3 seeds (about
# 90 minutes on 2 cores, from `make model`'s build or else the shipped file; scripts/reproduce.sh).
reproduce: all
	./scripts/reproduce.sh

# docs/REPRODUCTION.md's repair study: a planner damaged by SFT on flawed traces, then
# Flow-GRPO, 3 seeds (about 45 minutes on 2 cores; scripts/repair.sh, the shipped model).
repair: all
	./scripts/repair.sh

lint:
	@echo "clang-format check"; clang-format --dry-run --Werror $(FORMAT_SRC)
	@echo "cppcheck"; cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	    --inline-suppr --suppress=missingIncludeSystem -Iinclude -Isrc -D__GNUC__ src tests bench

format:
	clang-format -i $(FORMAT_SRC)

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
FUZZ_SECONDS ?= 30
# Builds every target, then runs each for FUZZ_SECONDS on its own corpus under build/fuzz/.
fuzz: $(FUZZ_BIN)
	@set -e; for f in $(FUZZ_BIN); do mkdir -p $$f.corpus; echo "fuzzing $$f for $(FUZZ_SECONDS) s"; \
	    AGENTFLOW_SRC=$(CURDIR) $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$f.corpus \
	    2>&1 | tail -3; done
build/fuzz/%: tests/fuzz/%.c $(LIB_SRC) $(GEN_PROMPTS) $(GEN_WEB)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fopenmp -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
	    $(PKG_CFLAGS) -o $@ $< $(LIB_SRC) $(GEN_PROMPTS) $(GEN_WEB) $(PKG_LIBS) -lm -pthread

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
