# engine.mk - builds the engine (plain C11, no PostgreSQL) and the
# opus_engine binary.  Included by the top-level Makefile; the test targets
# built from these objects (unit, golden, fuzz, gpu-fake) are in test/test.mk.
#
#   make engine   build/opus_engine (optimised)
#
# The engine is src/engine/<layer>/*.c, one folder per layer (each folder's
# README.md says what it holds and which folders it may include;
# src/engine/README.md the cut).  Headers are included by their path under src/engine
# ("format/gguf.h").  Files named *_avx2.c are compiled with -mavx2 -mfma
# -mf16c and only called after a run-time CPU check.

ENGINE_DIRS := base quant format text cpu model runtime cli
# (model/backend_cuda.c: the CUDA backend's host side, built only for CUDA,
# below; cli/opus_engine.c: main() of build/opus_engine)
ENGINE_SRCS := $(sort $(filter-out src/engine/model/backend_cuda%.c, \
	$(foreach d,$(filter-out cli,$(ENGINE_DIRS)),$(wildcard src/engine/$(d)/*.c))))
# The opus_engine subcommands (cli/, but main() in cli/opus_engine.c): only
# the binary links them, and the unit tests of those tools (test/test.mk).
CLI_SRCS := $(sort $(filter-out src/engine/cli/opus_engine.c,$(wildcard src/engine/cli/*.c)))
CLI_OBJS := $(patsubst src/engine/%.c,build/engine/%.o,$(CLI_SRCS))
CLI_SAN_OBJS := $(patsubst src/engine/%.c,build/engine-san/%.o,$(CLI_SRCS))
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
SHARED_SRCS := src/params.c src/protocol.c
ENGINE_OBJS := $(patsubst src/engine/%.c,build/engine/%.o,$(ENGINE_SRCS)) \
	$(patsubst src/%.c,build/shared/%.o,$(SHARED_SRCS))
ENGINE_SAN_OBJS := $(patsubst src/engine/%.c,build/engine-san/%.o,$(ENGINE_SRCS)) \
	$(patsubst src/%.c,build/shared-san/%.o,$(SHARED_SRCS))
# test_golden_logits runs in the golden suite (optimised, every tensor type);
# under the sanitizers it took 1,248 s of the unit suite's ~1,700 s here
# (load 15) and checked only what the golden suite checks, so `make unit`
# leaves it out.  test_gemma3 (Gemma 3 270M against llama.cpp) likewise runs
# optimised in the golden suite (57 s CPU; 311 s under the sanitizers).
UNIT_SRCS := $(filter-out test/unit/test_golden_logits.c test/unit/test_gemma3.c,$(sort $(wildcard test/unit/test_*.c)))
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

# relink when CUDA is switched on or off
CUDA_SETTING := build/cuda-setting
$(shell mkdir -p build; [ "$$(cat $(CUDA_SETTING) 2>/dev/null)" = "$(CUDA)" ] || echo "$(CUDA)" > $(CUDA_SETTING))

build/opus_engine: src/engine/cli/opus_engine.c $(CLI_OBJS) $(ENGINE_BIN_OBJS) $(CUDA_SETTING)
	$(ENGINE_CC) $(ENGINE_CFLAGS_BASE) $(ENGINE_OPT) $< $(CLI_OBJS) $(ENGINE_BIN_OBJS) -o $@ $(ENGINE_BIN_LIBS)

.PHONY: engine
engine: build/opus_engine
