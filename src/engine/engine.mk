# engine.mk - builds the engine (plain C11, no PostgreSQL), the opus_engine
# binary and the engine unit tests.  Included by the top-level Makefile.
#
#   make engine   build/opus_engine (optimised)
#   make unit     every test/unit/test_*.c, built with ASan+UBSan, run
#
# Any src/engine/*.c is part of the engine; files named *_avx2.c are compiled
# with -mavx2 -mfma -mf16c and only called after a run-time CPU check.

ENGINE_SRCS := $(sort $(wildcard src/engine/*.c))
ENGINE_CC ?= gcc
ENGINE_WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror
ENGINE_CFLAGS_BASE := -std=gnu11 -D_GNU_SOURCE -iquote src/engine -iquote src $(ENGINE_WARN) -fPIC -pthread
ENGINE_OPT := -O2 -g -fno-math-errno
ENGINE_SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# Unicode categories for the tokenizer's pre-tokenizers (Debian: libutf8proc-dev).
ENGINE_EXTRA_LIBS += -lutf8proc
ENGINE_LIBS := -lm -lpthread $(ENGINE_EXTRA_LIBS)
AVX2_FLAGS := -mavx2 -mfma -mf16c

ENGINE_OBJS := $(patsubst src/engine/%.c,build/engine/%.o,$(ENGINE_SRCS))
ENGINE_SAN_OBJS := $(patsubst src/engine/%.c,build/engine-san/%.o,$(ENGINE_SRCS))
UNIT_SRCS := $(sort $(wildcard test/unit/test_*.c))
UNIT_BINS := $(patsubst test/unit/%.c,build/unit/%,$(UNIT_SRCS))
ENGINE_HDRS := $(wildcard src/engine/*.h src/protocol.h)

flags_for = $(if $(findstring _avx2,$(1)),$(AVX2_FLAGS))

build/engine/%.o: src/engine/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $(call flags_for,$<) -c $< -o $@

build/engine-san/%.o: src/engine/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(call flags_for,$<) -c $< -o $@

build/opus_engine: src/opus_engine.c $(ENGINE_OBJS)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $< $(ENGINE_OBJS) -o $@ $(ENGINE_LIBS)

build/unit/%: test/unit/%.c $(ENGINE_SAN_OBJS) test/unit/unit.h
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) -iquote test/unit $(ENGINE_SAN) $< $(ENGINE_SAN_OBJS) -o $@ $(ENGINE_LIBS)

.PHONY: engine unit
engine: build/opus_engine

# Each unit test prints "N passed, N failed" and exits non-zero on failure.
unit: $(UNIT_BINS)
	@fail=0; for t in $(UNIT_BINS); do \
		echo "== $$t"; \
		OPUS_MODEL=$(abspath $(DEFAULT_MODEL)) $$t || fail=1; \
	done; exit $$fail
