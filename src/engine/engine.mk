# engine.mk - builds the engine (plain C11, no PostgreSQL), the opus_engine
# binary and the engine unit tests.  Included by the top-level Makefile.
#
#   make engine   build/opus_engine (optimised)
#   make unit     every test/unit/test_*.c, built with ASan+UBSan, run
#
# The engine is src/engine/<layer>/*.c, one folder per layer (each folder's
# README.md says what it holds and which folders it may include; docs/design.md
# "Engine layout").  Headers are included by their path under src/engine
# ("format/gguf.h").  Files named *_avx2.c are compiled with -mavx2 -mfma
# -mf16c and only called after a run-time CPU check.

ENGINE_DIRS := base quant format text cpu model runtime cli
# (model/backend_cuda.c: the CUDA backend's host side, built only for CUDA,
# below; cli/opus_engine.c: main() of build/opus_engine)
ENGINE_SRCS := $(sort $(filter-out src/engine/model/backend_cuda%.c src/engine/cli/opus_engine.c, \
	$(foreach d,$(ENGINE_DIRS),$(wildcard src/engine/$(d)/*.c))))
ENGINE_CC ?= gcc
ENGINE_WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror
ENGINE_CFLAGS_BASE := -std=gnu11 -D_GNU_SOURCE -iquote src/engine -iquote src $(ENGINE_WARN) -fPIC -pthread
ENGINE_OPT := -O2 -g -fno-math-errno
ENGINE_SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# Unicode categories for the tokenizer's pre-tokenizers (Debian: libutf8proc-dev).
ENGINE_EXTRA_LIBS += -lutf8proc
ENGINE_LIBS := -lm -lpthread $(ENGINE_EXTRA_LIBS)
AVX2_FLAGS := -mavx2 -mfma -mf16c

# src/*.c next to the wire format: plain C both sides link (the extension
# lists them in the top-level Makefile's OBJS).
SHARED_SRCS := src/params.c
ENGINE_OBJS := $(patsubst src/engine/%.c,build/engine/%.o,$(ENGINE_SRCS)) \
	$(patsubst src/%.c,build/shared/%.o,$(SHARED_SRCS))
ENGINE_SAN_OBJS := $(patsubst src/engine/%.c,build/engine-san/%.o,$(ENGINE_SRCS)) \
	$(patsubst src/%.c,build/shared-san/%.o,$(SHARED_SRCS))
UNIT_SRCS := $(sort $(wildcard test/unit/test_*.c))
UNIT_BINS := $(patsubst test/unit/%.c,build/unit/%,$(UNIT_SRCS))
ENGINE_HDRS := $(wildcard $(foreach d,$(ENGINE_DIRS),src/engine/$(d)/*.h) src/protocol.h src/params.h)

flags_for = $(if $(findstring _avx2,$(1)),$(AVX2_FLAGS))

build/engine/%.o: src/engine/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $(call flags_for,$<) -c $< -o $@

build/engine-san/%.o: src/engine/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(call flags_for,$<) -c $< -o $@

build/shared/%.o: src/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) -c $< -o $@

build/shared-san/%.o: src/%.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) -c $< -o $@

# ---------------------------------------------------------------------------
# CUDA backend (kernels/*.cu, src/engine/model/backend_cuda.c; README "CUDA backend").
# Built into build/opus_engine when nvcc is found (CUDA=1 insists, CUDA=0
# forces a CPU-only engine).  Only opus_engine and the GPU check
# build/gpu/test_gpu link CUDA: the unit and golden tests use the CPU-only
# objects and the PostgreSQL library never sees any of it.  backend.c is
# compiled a second time with OPUS_HAVE_CUDA for the CUDA engine.
#
#   make gpu      build/opus_engine (with CUDA) and build/gpu/test_gpu

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(NVCC),1,0)
endif
# H200/H100 (sm_90) and A100-class (sm_80) binaries, and sm_90 PTX for newer GPUs
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -std=c++20 -O3 --Werror all-warnings \
	-Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter,-fPIC $(CUDA_ARCHS)
CUDA_LIBDIR ?= $(CUDA_HOME)/lib64
# the runtime statically; cuBLAS is dlopen'ed by backend_cuda.c when a CUDA
# context is made (the rpath lets it find libcublas here)
CUDA_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
CUDA_CFLAGS := -DOPUS_HAVE_CUDA -iquote kernels -isystem $(CUDA_HOME)/include
KERNEL_SRCS := $(sort $(wildcard kernels/*.cu))
KERNEL_OBJS := $(patsubst kernels/%.cu,build/cuda/%.o,$(KERNEL_SRCS))
KERNEL_HDRS := $(wildcard kernels/*.h kernels/*.cuh)

ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1 but no nvcc in $(CUDA_HOME)/bin or on PATH)
endif
ENGINE_BIN_OBJS := $(filter-out build/engine/model/backend.o,$(ENGINE_OBJS)) \
	build/cuda/backend.o build/cuda/backend_cuda.o $(KERNEL_OBJS)
ENGINE_BIN_LIBS := $(ENGINE_LIBS) $(CUDA_LIBS)
else
ENGINE_BIN_OBJS := $(ENGINE_OBJS)
ENGINE_BIN_LIBS := $(ENGINE_LIBS)
endif

build/cuda/%.o: kernels/%.cu $(KERNEL_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

build/cuda/backend.o: src/engine/model/backend.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $(CUDA_CFLAGS) -c $< -o $@

build/cuda/backend_cuda.o: src/engine/model/backend_cuda.c $(ENGINE_HDRS) $(KERNEL_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $(CUDA_CFLAGS) -c $< -o $@

# The GPU check's program (test/gpu/README): kernels against the CPU
# reference, whole forward passes on both backends, throughput.
build/gpu/test_gpu: test/gpu/test_gpu.c $(ENGINE_BIN_OBJS) test/unit/unit.h
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $(CUDA_CFLAGS) -iquote test/unit $< \
		$(ENGINE_BIN_OBJS) -o $@ $(ENGINE_BIN_LIBS) -lcublas

.PHONY: gpu
ifeq ($(CUDA),1)
gpu: build/opus_engine build/gpu/test_gpu
# CI (no GPU) compiles and links the whole CUDA path with the default build
all: build/gpu/test_gpu
else
gpu:
	@echo "make gpu: no nvcc found (CUDA_HOME=$(CUDA_HOME)); set CUDA_HOME or NVCC" >&2; exit 1
endif

# The CUDA backend's host side on the CPU, under ASan (test/gpu/fake): a
# fake runtime with the kernels' launchers as plain loops, and a fake cuBLAS
# the backend dlopens through OPUS_CUBLAS_LIB.  `make gpu-fake` builds it and
# runs the GPU check's forward mode (CPU backend vs the backend_cuda.c path)
# on small generated models (dense in three types, MoE; ~20 s), and on
# GPU_FAKE_MODEL too when set (the default model takes ~8 min here); needs
# the CUDA headers, not a GPU.
GPU_FAKE_OBJS := build/gpu/fake/fake_cuda.o build/gpu/fake/backend.o build/gpu/fake/backend_cuda.o
GPU_FAKE_BLAS := build/gpu/fake/libfakecublas.so

build/gpu/fake/fake_cuda.o: test/gpu/fake/fake_cuda.c $(ENGINE_HDRS) $(KERNEL_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(CUDA_CFLAGS) -c $< -o $@

build/gpu/fake/backend.o: src/engine/model/backend.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(CUDA_CFLAGS) -c $< -o $@

build/gpu/fake/backend_cuda.o: src/engine/model/backend_cuda.c $(ENGINE_HDRS) $(KERNEL_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(CUDA_CFLAGS) -c $< -o $@

$(GPU_FAKE_BLAS): test/gpu/fake/fake_cublas.c $(KERNEL_HDRS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) -std=gnu11 -O2 -g -shared -fPIC $(ENGINE_WARN) $(CUDA_CFLAGS) $< -o $@

build/gpu/test_gpu_fake: test/gpu/test_gpu.c $(filter-out build/engine-san/model/backend.o,$(ENGINE_SAN_OBJS)) \
		$(GPU_FAKE_OBJS) $(GPU_FAKE_BLAS) test/unit/unit.h
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $(CUDA_CFLAGS) -iquote test/unit $< \
		$(filter-out build/engine-san/model/backend.o,$(ENGINE_SAN_OBJS)) $(GPU_FAKE_OBJS) \
		$(abspath $(GPU_FAKE_BLAS)) -Wl,-rpath,$(abspath $(dir $(GPU_FAKE_BLAS))) -o $@ $(ENGINE_LIBS) -ldl

.PHONY: gpu-fake
GPU_FAKE_MODELS := tiny:q4_k tiny:q4_1 tiny:f16 tiny-moe:q8_0
gpu-fake: build/gpu/test_gpu_fake $(GPU_FAKE_BLAS) build/opus_engine
	@set -e; for m in $(GPU_FAKE_MODELS) $(if $(GPU_FAKE_MODEL),file:$(GPU_FAKE_MODEL)); do \
		shape=$${m%%:*}; type=$${m#*:}; f=build/gpu/fake/$$shape-$$type.gguf; \
		if [ $$shape = file ]; then f=$$type; \
		elif [ ! -s $$f ]; then build/opus_engine genmodel --shape $$shape --type $$type \
			--out $$f.tmp > /dev/null && mv $$f.tmp $$f; fi; \
		echo "== gpu-fake $$f"; \
		OPUS_CUBLAS_LIB=$(abspath $(GPU_FAKE_BLAS)) build/gpu/test_gpu_fake forward \
			--model $$f --tokens 24 --cpu-threads 2; \
	done

# relink when CUDA is switched on or off
CUDA_SETTING := build/cuda-setting
$(shell mkdir -p build; [ "$$(cat $(CUDA_SETTING) 2>/dev/null)" = "$(CUDA)" ] || echo "$(CUDA)" > $(CUDA_SETTING))

build/opus_engine: src/engine/cli/opus_engine.c $(ENGINE_BIN_OBJS) $(CUDA_SETTING)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $< $(ENGINE_BIN_OBJS) -o $@ $(ENGINE_BIN_LIBS)

build/unit/%: test/unit/%.c $(ENGINE_SAN_OBJS) test/unit/unit.h test/unit/unit_forward.h
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) -iquote test/unit $(ENGINE_SAN) $< $(ENGINE_SAN_OBJS) -o $@ $(ENGINE_LIBS)

.PHONY: engine unit check-layers
engine: build/opus_engine

# The include rules between the engine's folders (src/engine/README.md):
# each folder's README.md `may include:` line against every #include.
check-layers:
	python3 test/tools/check_layers.py src/engine

# Each unit test prints "N passed, N failed" and exits non-zero on failure.
unit: check-layers $(UNIT_BINS)
	@fail=0; for t in $(UNIT_BINS); do \
		echo "== $$t"; \
		OPUS_MODEL=$(abspath $(DEFAULT_MODEL)) $$t || fail=1; \
	done; exit $$fail

# The llama.cpp golden comparison (test/golden/logits/README), optimised
# build: every tensor type's variant is regenerated by our quantizer first.
build/test_golden_logits: test/unit/test_golden_logits.c $(ENGINE_OBJS) test/unit/unit.h
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) -iquote test/unit $(ENGINE_OPT) $< $(ENGINE_OBJS) -o $@ $(ENGINE_LIBS)

.PHONY: golden
golden: build/test_golden_logits build/opus_engine $(DEFAULT_MODEL)
	test/tools/make_model_variants.sh
	OPUS_MODEL=$(abspath $(DEFAULT_MODEL)) OPUS_GOLDEN_TYPES=all build/test_golden_logits

# ---------------------------------------------------------------------------
# Fuzzing (test/fuzz/README).  Owned by the hardening work; keep separate.
#
#   make fuzz           build every test/fuzz/fuzz_*.c with clang
#                       -fsanitize=fuzzer,address,undefined and run each for
#                       FUZZ_SECONDS (default 60) with allocation caps, from
#                       the seeds in test/fuzz/corpus/<target>/ (new inputs go
#                       to build/fuzz/work/<target>/, findings to
#                       build/fuzz/artifacts/<target>/).  FUZZ_TARGETS picks.
#   make fuzz-regress   no libFuzzer needed: gcc + ASan/UBSan builds of the
#                       same targets with test/fuzz/replay_main.c, replaying
#                       test/fuzz/corpus/ and test/fuzz/regressions/ (CI).

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_RSS_MB ?= 2048
FUZZ_MALLOC_MB ?= 512
FUZZ_NICE ?= nice -n 19
FUZZ_TARGETS ?= gguf tokenizer protocol chat model jinja
FUZZ_ARGS ?=
FUZZ_CFLAGS := -g -O1 -std=gnu11 -D_GNU_SOURCE -iquote src/engine -iquote src \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
# clang 14 rejects qtype.c's __builtin_cpu_supports("f16c"): the type table
# and kernels are linked from the gcc build, uninstrumented.
FUZZ_GCC_OBJS := build/engine/quant/qtype.o build/engine/quant/quant_ref.o build/engine/quant/quant_avx2.o
FUZZ_SRCS_gguf := src/engine/format/gguf.c src/engine/base/status.c
FUZZ_SRCS_tokenizer := src/engine/text/tokenizer.c src/engine/text/tok_encode.c src/engine/text/unicode.c \
	src/engine/format/gguf.c src/engine/format/gguf_write.c src/engine/base/status.c
FUZZ_SRCS_protocol := $(SHARED_SRCS)
FUZZ_SRCS_chat := src/engine/text/chat.c src/engine/base/status.c
FUZZ_SRCS_jinja := $(wildcard src/engine/text/jinja_*.c) src/engine/base/status.c
# the whole engine but the type table and kernels, AVX2 paths included
# (matmul_avx2.c's VNNI kernels need gcc's per-function target attributes)
FUZZ_SRCS_model := $(filter-out src/engine/quant/qtype.c src/engine/quant/quant_ref.c src/engine/quant/quant_avx2.c \
	src/engine/cpu/matmul_avx2.c src/engine/cli/%.c src/engine/runtime/serve.c,$(ENGINE_SRCS)) $(SHARED_SRCS)
FUZZ_FLAGS_model := $(AVX2_FLAGS)
FUZZ_LIBS_model := build/engine/cpu/matmul_avx2.o -lutf8proc
FUZZ_LIBS_tokenizer := -lutf8proc
FUZZ_MAXLEN_gguf := 16384
FUZZ_MAXLEN_tokenizer := 2048
FUZZ_MAXLEN_protocol := 4096
FUZZ_MAXLEN_chat := 4096
FUZZ_MAXLEN_jinja := 16384
FUZZ_MAXLEN_model := 262144
FUZZ_MODEL_ENV = $(if $(wildcard $(DEFAULT_MODEL)),OPUS_MODEL=$(abspath $(DEFAULT_MODEL)))

build/fuzz/fuzz_%: test/fuzz/fuzz_%.c $(ENGINE_HDRS) $(FUZZ_GCC_OBJS) build/engine/cpu/matmul_avx2.o
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_FLAGS_$*) $< $(FUZZ_SRCS_$*) $(FUZZ_GCC_OBJS) $(FUZZ_LIBS_$*) -lm -lpthread -o $@

build/fuzz-replay/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/replay_main.c $(ENGINE_SAN_OBJS)
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_SAN) $< test/fuzz/replay_main.c $(ENGINE_SAN_OBJS) -o $@ $(ENGINE_LIBS)

.PHONY: fuzz fuzz-build fuzz-regress
fuzz-build: $(addprefix build/fuzz/fuzz_,$(FUZZ_TARGETS))

# One target at a time, niced (shared machines).  -malloc_limit_mb makes any
# single allocation above the cap a finding, so a declared huge size in an
# input cannot exhaust memory unnoticed; -rss_limit_mb bounds the process.
fuzz: fuzz-build
	@set -e; $(foreach t,$(FUZZ_TARGETS), \
		mkdir -p build/fuzz/work/$(t) build/fuzz/artifacts/$(t) test/fuzz/corpus/$(t); \
		echo "== fuzz_$(t) for $(FUZZ_SECONDS) s"; \
		$(FUZZ_MODEL_ENV) $(FUZZ_NICE) build/fuzz/fuzz_$(t) \
			-max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAXLEN_$(t)) \
			-rss_limit_mb=$(FUZZ_RSS_MB) -malloc_limit_mb=$(FUZZ_MALLOC_MB) \
			-timeout=10 -print_final_stats=1 \
			-artifact_prefix=build/fuzz/artifacts/$(t)/ $(FUZZ_ARGS) \
			build/fuzz/work/$(t) test/fuzz/corpus/$(t);)

# Replays run with a per-allocation cap too: a declared huge size must be
# refused by the reader (or fail cleanly), not attempted.
fuzz-regress: $(addprefix build/fuzz-replay/fuzz_,$(FUZZ_TARGETS))
	@fail=0; for t in $(FUZZ_TARGETS); do \
		dirs=""; \
		for d in test/fuzz/corpus/$$t test/fuzz/regressions/$$t; do \
			[ -d $$d ] && dirs="$$dirs $$d"; \
		done; \
		echo "== fuzz_$$t:$$dirs"; \
		$(FUZZ_MODEL_ENV) ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=$(FUZZ_MALLOC_MB):detect_leaks=1 \
			build/fuzz-replay/fuzz_$$t $$dirs || fail=1; \
	done; \
	if [ $$fail -eq 0 ]; then echo "fuzz-regress: ok"; else echo "fuzz-regress: FAILED"; fi; \
	exit $$fail

# ---------------------------------------------------------------------------
# MoE goldens (test/golden/moe/README).  Owned by the MoE work; keep separate.
#
#   make golden-moe   generate the random-weight MoE models into MOE_DIR
#                     (test/tools/gen_moe_model.py: deterministic, needs the
#                     python gguf and numpy packages; existing files are
#                     kept) and check them against llama.cpp's goldens with
#                     an optimised build of test/unit/test_golden_moe.c, all
#                     four tensor types.

MOE_DIR ?= models/moe
MOE_PYTHON ?= python3

build/test_golden_moe: test/unit/test_golden_moe.c $(ENGINE_OBJS) test/unit/unit.h
	@mkdir -p $(dir $@)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) -iquote test/unit $(ENGINE_OPT) $< $(ENGINE_OBJS) -o $@ $(ENGINE_LIBS)

.PHONY: golden-moe
golden-moe: build/test_golden_moe build/opus_engine $(DEFAULT_MODEL)
	$(MOE_PYTHON) test/tools/gen_moe_model.py --out $(MOE_DIR) --engine build/opus_engine \
		--tokenizer-from $(DEFAULT_MODEL)
	OPUS_MOE_MODELS=$(MOE_DIR) OPUS_MOE_TYPES=f32,f16,q8_0,q4_k build/test_golden_moe
