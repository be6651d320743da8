/*
 * model_int.h - internal: the structs behind struct opus_model (weights)
 * and struct opus_ctx (run state), for the files that build and run them:
 * model.c and model_bert.c (load), forward.c (the CPU forward pass),
 * backend.c and backend_cuda.c (the backends), and white-box tests
 * (test/unit/test_kv.c, test_scheduler.c, test/gpu/test_gpu.c).  The KV
 * pool has its own header (kv.h); everything else uses model.h.
 */
#ifndef OPUS_MODEL_INT_H
#define OPUS_MODEL_INT_H

#include "model/backend.h"
#include "model/kv.h"
#include "model/model.h"
#include "model/moe.h"
#include "base/threadpool.h"

/* A weight matrix: n_out rows of n_in elements, row-major, in the mapping. */
struct opus_wmat
{
	const char *name;
	const uint8_t *data;
	enum opus_qtype type;
	const struct opus_qtype_info *qi;
	int64_t		n_in;
	int64_t		n_out;
	size_t		row_bytes;
};

struct opus_layer
{
	float	   *attn_norm;		/* [n_embd] */
	struct opus_wmat wq;		/* [n_head * head_dim][n_embd] */
	struct opus_wmat wk;		/* [n_head_kv * head_dim][n_embd] */
	struct opus_wmat wv;		/* [n_head_kv * head_dim][n_embd] */
	struct opus_wmat wo;		/* [n_embd][n_head * head_dim] */
	float	   *bq;				/* qwen2: [n_head * head_dim], else NULL */
	float	   *bk;				/* qwen2: [n_head_kv * head_dim] */
	float	   *bv;				/* qwen2: [n_head_kv * head_dim] */
	float	   *attn_q_norm;	/* qwen3moe: [head_dim] per head; olmoe: [n_head * head_dim]; else NULL */
	float	   *attn_k_norm;	/* qwen3moe: [head_dim] per head; olmoe: [n_head_kv * head_dim] */
	float	   *ffn_norm;		/* [n_embd] */
	float	   *attn_post_norm;	/* gemma3: [n_embd] on Wo's output, else NULL */
	float	   *ffn_post_norm;	/* gemma3: [n_embd] on Wdown's output, else NULL */
	bool		swa;			/* gemma3 local layer: sliding window, rope_freq_base_swa */
	/* dense feed-forward (zeroed in a MoE layer) */
	struct opus_wmat w_gate;	/* [n_ff][n_embd] */
	struct opus_wmat w_up;		/* [n_ff][n_embd] */
	struct opus_wmat w_down;	/* [n_embd][n_ff] */
	/* Mixture of Experts (model_moe.c, moe.c) */
	bool		is_moe;
	struct opus_wmat router;	/* ffn_gate_inp: [n_expert][n_embd] */
	struct opus_wmat shexp_gate;	/* qwen2moe ffn_gate_inp_shexp: [1][n_embd], else zeroed */
	struct opus_moe_experts moe;
};

struct opus_model
{
	struct opus_hparams hp;
	struct opus_gguf *gguf;
	struct opus_tokenizer *tok;
	uint64_t	identity;

	struct opus_wmat tok_embd;	/* [n_vocab][n_embd] */
	struct opus_wmat output;	/* [n_vocab][n_embd]; = tok_embd if tied */
	float	   *output_norm;	/* [n_embd] */
	float	   *rope_freqs;		/* [rope_dim / 2] divisors, or NULL */
	struct opus_layer *layers;	/* [n_layer] */

	float	   *owned;			/* one allocation for every f32 vector above */
	struct opus_bert *bert;		/* encoder weights (model_bert.c), else NULL */
};

/* model.c's tensor lookups, shared with the other loaders */
enum opus_status opus_find_matrix(const struct opus_gguf *g, const char *name,
								  int64_t n_in, int64_t n_out, bool required,
								  struct opus_wmat *w, struct opus_error *err);
enum opus_status opus_load_vector(const struct opus_gguf *g, const char *name,
								  int64_t n, bool required, float *dst,
								  bool *found, struct opus_error *err);

/*
 * forward.c's RoPE, shared with the encoder (model_bert.c): the cos/sin of
 * every rotated pair at position pos (rope_dim / 2 of each, llama.cpp's
 * running product), and the rotation of n_heads heads of vec in place
 * (adjacent pairs, or NeoX halves when neox).
 */
void		opus_rope_table(const struct opus_model *m, int pos, float base,
							float freq_scale, float *cs, float *sn);
void		opus_rope_apply(float *vec, int n_heads, int head_dim, int rope_dim,
							bool neox, const float *cs, const float *sn);

/* model_bert.c: the encoder's hyperparameters and weights */
enum opus_status opus_bert_read_hparams(const struct opus_gguf *g,
										struct opus_hparams *hp,
										struct opus_error *err);
enum opus_status opus_bert_load(struct opus_model *m, struct opus_error *err);
void		opus_bert_free(struct opus_bert *b);

/* ---- run state ---- */

struct opus_ctx
{
	struct opus_model *model;
	struct opus_ctx_params params;
	struct opus_kv kv;
	const struct opus_backend_ops *ops;	/* the backend (backend.h) */
	void	   *be;				/* a device backend's run state, else NULL */
	struct opus_pool *pool;		/* CPU backend: threads */
	struct opus_fwd_state *fs;	/* CPU backend: scratch of the forward pass (forward.c) */
	uint64_t   *expert_load;	/* [n_layer][n_expert] tokens routed (MoE), else NULL */
	struct opus_moe_io_stats moe_io;	/* updated by the forward pass */
};

enum opus_status opus_fwd_state_create(struct opus_ctx *c, struct opus_error *err);
void		opus_fwd_state_free(struct opus_fwd_state *fs);

#endif							/* OPUS_MODEL_INT_H */
