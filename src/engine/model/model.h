/*
 * model.h - a loaded model (hyperparameters, mapped weights, tokenizer) and
 * the batched forward pass over a block-based KV cache.
 *
 * Structs are split by mutability (llama2.c): struct opus_hparams and the
 * weights are immutable after opus_model_load and shared by every context;
 * struct opus_ctx holds the mutable run state (KV block pool, scratch
 * buffers, thread pool) and is used by one thread at a time.
 *
 * KV cache: a pool of n_blocks blocks, each holding K and V for block_size
 * token positions across all layers.  A sequence (struct opus_seq) owns a
 * block table; opus_forward appends the batch's tokens to each sequence's
 * cache, allocating blocks as needed.  The pool memory may be supplied by
 * the caller (a shared-memory arena) or allocated by opus_ctx_create.
 *
 * Determinism: the logits of a token depend only on the model, its
 * sequence's tokens and positions, never on the other items of the batch or
 * the thread count (work is split by output rows / heads; each row's
 * reduction order is fixed).
 */
#ifndef OPUS_MODEL_H
#define OPUS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "quant/qtype.h"
#include "base/status.h"
#include "text/tokenizer.h"

enum opus_arch
{
	OPUS_ARCH_LLAMA = 0,		/* llama, SmolLM2, TinyLlama, Llama 3, Mistral */
	OPUS_ARCH_QWEN2,			/* llama + QKV bias */
	OPUS_ARCH_QWEN2MOE,			/* qwen2 + experts + gated shared expert */
	OPUS_ARCH_QWEN3MOE,			/* NeoX RoPE, per-head q/k norms, experts */
	OPUS_ARCH_OLMOE,			/* NeoX RoPE, whole-row q/k norms, experts */
	OPUS_ARCH_GEMMA3,			/* NeoX RoPE, per-head q/k norms, post norms, GeGLU,
								 * sliding-window layers, scaled embeddings */
	OPUS_ARCH_BERT,				/* encoder: learned positions, post-LayerNorm, GELU,
								 * bidirectional attention, pooled (model_bert.c) */
	OPUS_ARCH_NOMIC_BERT,		/* encoder: bert with NeoX RoPE instead of learned
								 * positions, SwiGLU, fused QKV, no biases */
	OPUS_ARCH__COUNT
};

struct opus_hparams
{
	enum opus_arch arch;
	char		arch_name[32];	/* general.architecture */
	char		name[128];		/* general.name (or file name) */
	int32_t		n_vocab;
	int32_t		n_ctx_train;
	int32_t		n_embd;
	int32_t		n_layer;
	int32_t		n_head;
	int32_t		n_head_kv;
	int32_t		head_dim;		/* n_embd / n_head unless key_length says */
	int32_t		n_ff;
	float		norm_eps;
	float		rope_freq_base;
	float		rope_freq_scale;
	/* llama3-style rope scaling (rope.scaling.type / rope_freqs.weight) */
	bool		has_rope_freqs;
	int32_t		rope_dim;		/* dimensions rotated (rope.dimension_count) */
	bool		tied_embeddings;	/* no output.weight: reuse token_embd */
	enum opus_qtype main_type;	/* dominant weight type (general.file_type) */
	int64_t		n_params;
	/* Mixture of Experts (all 0 for a dense model; Mixtral is llama + experts) */
	int32_t		n_expert;		/* <arch>.expert_count */
	int32_t		n_expert_used;	/* experts per token (top-k) */
	int32_t		n_ff_exp;		/* an expert's feed-forward width */
	int32_t		n_ff_shexp;		/* the shared expert's (qwen2moe), else 0 */
	bool		expert_weights_norm;	/* top-k weights renormalised to sum 1 */
	float		expert_weights_scale;	/* top-k weights multiplied by this */
	/* gemma3 (all 0 otherwise: every layer global, scale 1 / sqrt(head_dim)) */
	int32_t		n_swa;			/* sliding window of the local layers, 0 = none */
	int32_t		swa_pattern;	/* layer il is local when il % pattern < pattern - 1 */
	float		rope_freq_base_swa; /* RoPE base of the local layers */
	float		attn_scale;		/* query scale (0: 1 / sqrt(head_dim)) */
	float		embd_scale;		/* token embeddings multiplied by this (0: 1) */
	/* encoders (bert): an embedding model, no KV cache, no logits */
	bool		is_encoder;
	int32_t		pooling;		/* enum opus_pooling, <arch>.pooling_type */
};

/* llama.cpp's pooling types (<arch>.pooling_type); NONE and RANK are refused. */
enum opus_pooling
{
	OPUS_POOLING_NONE = 0,
	OPUS_POOLING_MEAN = 1,
	OPUS_POOLING_CLS = 2,
	OPUS_POOLING_LAST = 3,
};

struct opus_model;

struct opus_load_params
{
	bool		use_mlock;		/* lock the mapping in memory */
};

enum opus_status opus_model_load(const char *path,
								 const struct opus_load_params *params,
								 struct opus_model **out,
								 struct opus_error *err);
void		opus_model_free(struct opus_model *m);

const struct opus_hparams *opus_model_hparams(const struct opus_model *m);
const struct opus_tokenizer *opus_model_tokenizer(const struct opus_model *m);
/* tokenizer.chat_template source, or NULL. */
const char *opus_model_chat_template(const struct opus_model *m, size_t *len);
/* 64-bit identity of the weights (hash of file size and header), for prefix-cache keys. */
uint64_t	opus_model_identity(const struct opus_model *m);

/* ---- run state ---- */

/*
 * Where a context runs.  Zero-initialised means the CPU, so existing
 * callers keep the CPU backend.  opus_device_parse reads the names the
 * opus.device setting and the --device flags use.
 */
enum opus_device_kind
{
	OPUS_DEVICE_CPU = 0,
	OPUS_DEVICE_CUDA = 1
};

struct opus_device
{
	enum opus_device_kind kind;
	int			index;			/* CUDA device ordinal */
};

/*
 * Parse "cpu", "auto" or "cuda:N" ("cuda" = "cuda:0").  "auto" resolves to
 * cuda:0 when this engine was built with CUDA and a device exists, else to
 * the CPU.  A CUDA name is checked here: OPUS_ERR_UNSUPPORTED when the
 * engine was built without CUDA, OPUS_ERR_DEVICE when device N does not
 * exist (or the driver cannot be used); OPUS_ERR_INVALID_ARG for a bad name.
 */
enum opus_status opus_device_parse(const char *name, struct opus_device *out,
								   struct opus_error *err);
/* "cpu" or "cuda:N" into buf (len >= 16); returns buf. */
const char *opus_device_name(const struct opus_device *d, char *buf, size_t len);

/*
 * Element type of the KV cache.  F16 (the default): K and V as IEEE half
 * floats.  Q8_0: each run of 32 values along head_dim as 32 int8 quants
 * and one F16 scale (1.0625 bytes a value instead of 2, so a pool of the
 * same size holds ~1.88x the tokens); the query is quantized the same way
 * and q.k is an integer dot product per 32 values.  Q8_0 needs a head_dim
 * that is a multiple of 32 and is not available with llama_batch_order.
 */
enum opus_kv_type
{
	OPUS_KV_F16 = 0,
	OPUS_KV_Q8_0 = 1,
	OPUS_KV__COUNT
};

/* "f16" / "q8_0", or NULL for an unknown value. */
const char *opus_kv_type_name(enum opus_kv_type t);

/* Parse "f16" / "q8_0" (case-insensitive); false if unknown. */
bool		opus_kv_type_parse(const char *s, enum opus_kv_type *out);

struct opus_ctx_params
{
	int			n_threads;		/* >= 1 */
	int			block_size;		/* tokens per KV block, default 16 */
	int64_t		n_blocks;		/* KV blocks in the pool */
	int			max_batch_tokens;	/* max tokens in one opus_forward call */
	int			n_ctx;			/* max positions per sequence (<= n_ctx_train unless allowed) */
	void	   *kv_memory;		/* optional caller-provided pool (NULL: allocate) */
	size_t		kv_memory_size;

	/*
	 * Attention as llama.cpp's CPU backend computes it for a multi-token
	 * batch (llamafile tinyBLAS order) for every sequence with more than
	 * one token in an opus_forward call; false (the default): always its
	 * one-token-batch order (ggml_vec_dot_f16).  True makes the logits
	 * bit-identical to llama.cpp's for the same split of a sequence into
	 * calls (e.g. prompt in one call, then one token per call), but makes
	 * them depend on that split; false keeps them independent of it.
	 */
	bool		llama_batch_order;

	/*
	 * The backend (zero: the CPU).  On a CUDA device the weights are
	 * uploaded once, the KV pool lives in device memory (kv_memory is not
	 * used) and the forward pass runs there; see backend.h.
	 */
	struct opus_device device;

	enum opus_kv_type kv_type;	/* element type of the KV cache (0 = F16) */
};

/* Bytes of KV pool memory a context with these params needs. */
size_t		opus_ctx_kv_bytes(const struct opus_model *m,
							  const struct opus_ctx_params *p);

struct opus_ctx;
enum opus_status opus_ctx_create(struct opus_model *m,
								 const struct opus_ctx_params *p,
								 struct opus_ctx **out,
								 struct opus_error *err);
void		opus_ctx_free(struct opus_ctx *c);
int64_t		opus_ctx_free_blocks(const struct opus_ctx *c);
/* The backend running c, e.g. "cpu" or "cuda:0 (NVIDIA H200, sm_90, ...)". */
const char *opus_ctx_describe(const struct opus_ctx *c, char *buf, size_t len);
/* The model c runs and the parameters it was created with. */
const struct opus_model *opus_ctx_model(const struct opus_ctx *c);
const struct opus_ctx_params *opus_ctx_params(const struct opus_ctx *c);
/* The CPU backend's worker threads of c (base/threadpool.h), or NULL. */
struct opus_pool *opus_ctx_pool(const struct opus_ctx *c);

/* A sequence: its block table and current length (positions 0..n_pos-1 cached). */
struct opus_seq
{
	int32_t	   *blocks;			/* block ids, n_blocks_cap allocated */
	int32_t		n_blocks;
	int32_t		n_blocks_cap;
	int32_t		n_pos;
};

void		opus_seq_init(struct opus_seq *s);
/* Return the sequence's blocks to the pool and reset it to empty. */
void		opus_seq_release(struct opus_ctx *c, struct opus_seq *s);
/* Drop cached positions >= n_pos (frees blocks no longer needed). */
void		opus_seq_truncate(struct opus_ctx *c, struct opus_seq *s, int32_t n_pos);
/*
 * Make dst (initialised and empty) a copy of src that shares src's blocks
 * (reference counted); the first write into a shared partial block copies it.
 */
enum opus_status opus_seq_fork(struct opus_ctx *c, const struct opus_seq *src,
							   struct opus_seq *dst, struct opus_error *err);

struct opus_batch_item
{
	struct opus_seq *seq;
	const int32_t *tokens;		/* appended at positions seq->n_pos... */
	int32_t		n_tokens;
	/*
	 * Logits out: if logits_all, n_tokens * n_vocab floats (one row per
	 * token), else n_vocab floats for the last token only.  NULL: none.
	 */
	float	   *logits;
	bool		logits_all;
};

/*
 * One forward pass over all items.  Total tokens must be <= max_batch_tokens.
 * Blocks are allocated from the pool as needed; if the pool runs out, returns
 * OPUS_ERR_CAPACITY before changing any sequence.  On success each seq->n_pos
 * has advanced by its n_tokens.
 */
enum opus_status opus_forward(struct opus_ctx *c,
							  struct opus_batch_item *items, int n_items,
							  struct opus_error *err);

/* ---- Mixture-of-Experts statistics ---- */

/*
 * Tokens routed to each expert by this context's forward passes since it
 * was created (or last reset): counts[layer * n_expert + e].  NULL (and
 * *n_layer = *n_expert = 0) for a dense model.  Valid until opus_ctx_free;
 * read it between opus_forward calls.
 */
const uint64_t *opus_ctx_expert_load(const struct opus_ctx *c, int32_t *n_layer,
									 int32_t *n_expert);
void		opus_ctx_expert_load_reset(struct opus_ctx *c);

/* Expert weight traffic of the batched dispatch (moe.c counts it). */
struct opus_moe_io_stats
{
	uint64_t	steps;			/* opus_forward calls that ran expert layers */
	uint64_t	bytes_total;	/* expert weight bytes read, all calls and layers */
	uint64_t	bytes_last;		/* ... by the last call, all layers */
	int32_t		max_reads_last; /* most times one expert's weights were read in one
								 * layer of the last call (1: each at most once) */
	int32_t		active_last;	/* active experts, summed over the layers, last call */
};

/* All zero for a dense model. */
void		opus_ctx_moe_io_stats(const struct opus_ctx *c, struct opus_moe_io_stats *out);

/* ---- encoders: sentence embeddings (model_bert.c) ---- */

/*
 * An encoder model (hparams is_encoder) runs here, never through opus_ctx
 * (opus_ctx_create refuses it): each input is encoded whole, with no KV
 * cache, and pooled into one vector of n_embd floats as the file's pooling
 * type says (mean, first token, last token), L2-normalised on request.
 * Many inputs go through one forward pass: their tokens are packed into
 * one activation matrix, attention runs per input over its own tokens only.
 * A vector depends only on its input's tokens: never on the other inputs
 * of the call, how they were packed, or the thread count (bit-identical).
 */
struct opus_encoder;

/* max_batch_tokens: tokens per forward pass (raised to the model's context). */
enum opus_status opus_encoder_create(const struct opus_model *m, int n_threads,
									 int max_batch_tokens,
									 struct opus_encoder **out,
									 struct opus_error *err);
void		opus_encoder_free(struct opus_encoder *e);

struct opus_embed_item
{
	const int32_t *tokens;		/* with the model's [CLS] ... [SEP] */
	int32_t		n_tokens;		/* 1 .. the model's context length */
	float	   *out;			/* n_embd floats */
};

/*
 * Encode every item; OPUS_ERR_INVALID_ARG (nothing written) for an empty
 * input, one longer than the context or a token id out of the vocabulary.
 */
enum opus_status opus_encode(struct opus_encoder *e,
							 const struct opus_embed_item *items, int n_items,
							 bool normalize, struct opus_error *err);

#endif							/* OPUS_MODEL_H */
