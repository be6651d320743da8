/*
 * model_decl.h - one model declaration of opus.models, and its parser
 * (model_decl.c).  Plain C: the extension links it, and so does the fuzz
 * harness (test/fuzz/fuzz_modeldecl.c), without PostgreSQL.
 */
#ifndef OPUS_MODEL_DECL_H
#define OPUS_MODEL_DECL_H

#include <stdbool.h>
#include <stddef.h>

#include "protocol.h"

/* Models served at once: the default (entry 0) and opus.models entries. */
#define OPUS_MAX_MODELS			8
#define OPUS_MODEL_NAME_LEN		64
/* An embedding model's query / document prefix (opus.models), NUL included. */
#define OPUS_EMBED_PREFIX_LEN	64
/* A role name, NUL included: PostgreSQL's NAMEDATALEN (models.c checks). */
#define OPUS_ROLE_NAME_LEN		64

/* One declared model, as opus.models says (parsed by OpusParseModels). */
typedef struct OpusModelDecl
{
	char		name[OPUS_MODEL_NAME_LEN];
	char		setting[OPUS_PROTO_PATH_LEN];	/* path or installed name */
	char		device[OPUS_PROTO_SHORT_LEN];	/* "" = opus.device */
	char		role[OPUS_ROLE_NAME_LEN];	/* "" = everyone */
	char		fallback[OPUS_MODEL_NAME_LEN];	/* "" = none */
	int			max_ttft_ms;	/* 0 = no objective */
	int			threads;		/* 0 = a share of the cores */
	int			kv_cache_size_mb;	/* 0 = opus.kv_cache_size */
	int			kv_cache_type;	/* -1 = opus.kv_cache_type */
	int			max_batch_tokens;	/* 0 = opus.max_batch_tokens */
	char		query_prefix[OPUS_EMBED_PREFIX_LEN];	/* "" = none */
	char		document_prefix[OPUS_EMBED_PREFIX_LEN]; /* "" = none */
} OpusModelDecl;

/* A lower-case identifier of 1..OPUS_MODEL_NAME_LEN-1 bytes: s[0..len). */
extern bool opus_model_name_valid(const char *s, size_t len);

/*
 * Parse an opus.models value into out[] (room for OPUS_MAX_MODELS - 1).
 * Returns false and a sentence in err when the value is malformed.
 */
extern bool OpusParseModels(const char *value, OpusModelDecl *out, int *n_out,
							char *err, size_t errlen);

#endif							/* OPUS_MODEL_DECL_H */
