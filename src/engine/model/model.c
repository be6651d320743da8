/*
 * model.c - loading a model from GGUF: hyperparameters from `<arch>.*`
 * metadata, weight tensors looked up by their llama.cpp names and checked
 * against those hyperparameters, the tokenizer, and the run-context
 * lifecycle (opus_ctx_create / opus_ctx_free).
 *
 * Weights stay in the read-only mapping of the file; only the small f32
 * vectors (norm weights, biases, RoPE frequency factors) are converted into
 * one owned allocation.  Every shape and type is validated here so the
 * forward pass can trust the model: a malformed file is an error, never a
 * crash.
 */
#include "model/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "model/model_moe.h"

static const char *const arch_names[OPUS_ARCH__COUNT] = {
	[OPUS_ARCH_LLAMA] = "llama",
	[OPUS_ARCH_QWEN2] = "qwen2",
	[OPUS_ARCH_QWEN2MOE] = "qwen2moe",
	[OPUS_ARCH_QWEN3MOE] = "qwen3moe",
	[OPUS_ARCH_OLMOE] = "olmoe",
	[OPUS_ARCH_GEMMA3] = "gemma3",
	[OPUS_ARCH_BERT] = "bert",
	[OPUS_ARCH_NOMIC_BERT] = "nomic-bert",
};

/* ---- metadata helpers ---- */

/* Read `<arch>.<suffix>` as a positive int32; absent -> def (or error if def < 0). */
static enum opus_status
get_hp_int(const struct opus_gguf *g, const char *arch, const char *suffix,
		   int64_t def, int64_t max, int32_t *out, struct opus_error *err)
{
	char		key[128];
	int64_t		v;
	enum opus_status st;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	st = opus_gguf_get_i64(g, key, &v, err);
	if (st == OPUS_ERR_NOT_FOUND)
	{
		if (def < 0)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "missing model metadata key \"%s\"", key);
		v = def;
	}
	else if (st != OPUS_OK)
		return st;
	if (v < 1 || v > max)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "model metadata \"%s\" = %lld out of range 1..%lld",
							  key, (long long) v, (long long) max);
	*out = (int32_t) v;
	return OPUS_OK;
}

static enum opus_status
get_hp_float(const struct opus_gguf *g, const char *arch, const char *suffix,
			 float def, bool *found, float *out, struct opus_error *err)
{
	char		key[128];
	float		v;
	enum opus_status st;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	st = opus_gguf_get_f32(g, key, &v, err);
	if (found)
		*found = (st == OPUS_OK);
	if (st == OPUS_ERR_NOT_FOUND)
		v = def;
	else if (st != OPUS_OK)
		return st;
	if (!isfinite(v))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "model metadata \"%s\" is not finite", key);
	*out = v;
	return OPUS_OK;
}

/* ---- tensor helpers ---- */

/*
 * Find a 2-D weight matrix [n_out][n_in] (ggml ne = {n_in, n_out}) whose type
 * has dot-product kernels.  Absent and !required: *w zeroed, OPUS_OK.
 */
enum opus_status
opus_find_matrix(const struct opus_gguf *g, const char *name, int64_t n_in,
			int64_t n_out, bool required, struct opus_wmat *w,
			struct opus_error *err)
{
	const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, name);
	const struct opus_qtype_info *qi;
	const struct opus_qtype_info *vqi;

	memset(w, 0, sizeof(*w));
	if (!t)
	{
		if (!required)
			return OPUS_OK;
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"%s\"", name);
	}
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
							  name, (long long) t->ne[0], (long long) t->ne[1],
							  (long long) t->ne[2], (long long) t->ne[3],
							  (long long) n_in, (long long) n_out);
	qi = opus_qtype_info(t->type);
	vqi = qi ? opus_qtype_info(qi->vec_dot_type) : NULL;
	if (!qi || !qi->supported || !qi->vec_dot || !qi->to_float ||
		!vqi || !vqi->from_float)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "unsupported tensor type %s for tensor \"%s\"",
							  qi ? qi->name : "unknown", name);
	w->name = t->name;
	w->data = t->data;
	w->type = t->type;
	w->qi = qi;
	w->n_in = n_in;
	w->n_out = n_out;
	if (!opus_qtype_row_size(t->type, n_in, &w->row_bytes))
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" row of %lld elements does not fit type %s",
							  name, (long long) n_in, qi->name);
	/* the reader checked nbytes against the file; double-check the shape */
	if (w->row_bytes * (size_t) n_out != t->nbytes)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" size does not match its shape", name);
	return OPUS_OK;
}

/*
 * Find a 1-D vector of n elements, convert it to f32 into dst.
 * Absent and !required: returns OPUS_OK with *found false.
 */
enum opus_status
opus_load_vector(const struct opus_gguf *g, const char *name, int64_t n,
			bool required, float *dst, bool *found, struct opus_error *err)
{
	const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, name);
	const struct opus_qtype_info *qi;

	*found = false;
	if (!t)
	{
		if (!required)
			return OPUS_OK;
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"%s\"", name);
	}
	if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" has shape [%lld, %lld, %lld, %lld], expected [%lld]",
							  name, (long long) t->ne[0], (long long) t->ne[1],
							  (long long) t->ne[2], (long long) t->ne[3],
							  (long long) n);
	qi = opus_qtype_info(t->type);
	if (!qi || !qi->supported || !qi->to_float ||
		n % qi->block_size != 0)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "unsupported tensor type %s for tensor \"%s\"",
							  qi ? qi->name : "unknown", name);
	qi->to_float(t->data, dst, n);
	for (int64_t i = 0; i < n; i++)
	{
		if (!isfinite(dst[i]))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "tensor \"%s\" holds a non-finite value", name);
	}
	*found = true;
	return OPUS_OK;
}

/* FNV-1a over a byte range, continuing from h. */
static uint64_t
fnv1a(uint64_t h, const void *data, size_t n)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < n; i++)
	{
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* ---- load ---- */

static enum opus_status
read_hparams(const struct opus_gguf *g, const char *path,
			 struct opus_hparams *hp, struct opus_error *err)
{
	const char *s;
	size_t		len;
	const char *a;
	enum opus_status st;
	int32_t		key_len,
				val_len;
	bool		found;
	float		factor;

	memset(hp, 0, sizeof(*hp));
	st = opus_gguf_get_str(g, "general.architecture", &s, &len, err);
	if (st == OPUS_ERR_NOT_FOUND)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "missing model metadata key \"general.architecture\"");
	if (st != OPUS_OK)
		return st;
	if (len >= sizeof(hp->arch_name))
		len = sizeof(hp->arch_name) - 1;
	memcpy(hp->arch_name, s, len);
	hp->arch_name[len] = '\0';
	hp->arch = OPUS_ARCH__COUNT;
	for (int i = 0; i < OPUS_ARCH__COUNT; i++)
	{
		if (strcmp(hp->arch_name, arch_names[i]) == 0)
			hp->arch = (enum opus_arch) i;
	}
	if (hp->arch == OPUS_ARCH__COUNT)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "unsupported model architecture \"%s\"", hp->arch_name);
	a = hp->arch_name;

	if (opus_gguf_get_str(g, "general.name", &s, &len, NULL) == OPUS_OK)
	{
		if (len >= sizeof(hp->name))
			len = sizeof(hp->name) - 1;
		memcpy(hp->name, s, len);
		hp->name[len] = '\0';
	}
	else
	{
		const char *base = strrchr(path, '/');

		snprintf(hp->name, sizeof(hp->name), "%s", base ? base + 1 : path);
	}

	if ((st = get_hp_int(g, a, "embedding_length", -1, 1 << 20, &hp->n_embd, err)) ||
		(st = get_hp_int(g, a, "block_count", -1, 4096, &hp->n_layer, err)) ||
		(st = get_hp_int(g, a, "attention.head_count", -1, 4096, &hp->n_head, err)) ||
		(st = get_hp_int(g, a, "attention.head_count_kv", hp->n_head, 4096, &hp->n_head_kv, err)) ||
		(st = get_hp_int(g, a, "feed_forward_length", -1, 1 << 22, &hp->n_ff, err)) ||
		(st = get_hp_int(g, a, "context_length", 2048, 1 << 24, &hp->n_ctx_train, err)))
		return st;
	if (hp->n_embd % hp->n_head != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "embedding length %d is not a multiple of the head count %d",
							  hp->n_embd, hp->n_head);
	if (hp->n_head % hp->n_head_kv != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "head count %d is not a multiple of the kv head count %d",
							  hp->n_head, hp->n_head_kv);
	if ((st = get_hp_int(g, a, "attention.key_length", hp->n_embd / hp->n_head,
						 1 << 16, &key_len, err)) ||
		(st = get_hp_int(g, a, "attention.value_length", key_len, 1 << 16,
						 &val_len, err)))
		return st;
	if (key_len != val_len)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "different key and value head sizes (%d, %d) are not supported",
							  key_len, val_len);
	if (key_len % 2 != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT, "head size %d is odd", key_len);
	hp->head_dim = key_len;
	if ((st = get_hp_int(g, a, "rope.dimension_count", hp->head_dim, 1 << 16,
						 &hp->rope_dim, err)))
		return st;
	if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "rope dimension count %d invalid for head size %d",
							  hp->rope_dim, hp->head_dim);

	if (hp->arch == OPUS_ARCH_BERT || hp->arch == OPUS_ARCH_NOMIC_BERT)
	{
		if ((st = opus_bert_read_hparams(g, hp, err)) != OPUS_OK)
			return st;
	}
	else if ((st = get_hp_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5f,
						   NULL, &hp->norm_eps, err)) ||
		(st = get_hp_float(g, a, "rope.freq_base", 10000.0f, NULL,
						   &hp->rope_freq_base, err)))
		return st;
	if (hp->norm_eps <= 0.0f || hp->rope_freq_base <= 0.0f)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "rms epsilon and rope base must be positive");

	/* RoPE scaling: linear (freq_scale = 1 / factor); others unsupported */
	hp->rope_freq_scale = 1.0f;
	{
		char		key[128];
		bool		typed;

		snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
		st = opus_gguf_get_str(g, key, &s, &len, err);
		if (st != OPUS_OK && st != OPUS_ERR_NOT_FOUND)
			return st;
		typed = (st == OPUS_OK);
		if (typed && !(len == 4 && memcmp(s, "none", 4) == 0) &&
			!(len == 6 && memcmp(s, "linear", 6) == 0))
			return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
								  "unsupported rope scaling type \"%.*s\"",
								  (int) (len > 32 ? 32 : len), s);
		if ((st = get_hp_float(g, a, "rope.scaling.factor", 0.0f, &found,
							   &factor, err)))
			return st;
		if (!found && (st = get_hp_float(g, a, "rope.scale_linear", 0.0f,
										 &found, &factor, err)))
			return st;
		if (typed && len == 4)
			found = false;		/* "none" */
		if (found && factor != 0.0f)
		{
			if (factor < 0.0f)
				return opus_error_set(err, OPUS_ERR_FORMAT,
									  "rope scaling factor %g is negative", factor);
			hp->rope_freq_scale = 1.0f / factor;
		}
	}
	if (hp->arch == OPUS_ARCH_GEMMA3)
	{
		int64_t		swa = 0;
		char		key[128];

		/*
		 * As llama.cpp reads Gemma 3: with a sliding window, 5 of every 6
		 * layers are local (window, RoPE base 10000, no scaling), every
		 * 6th global; queries scaled by 1 / sqrt(key_length) (the 27B
		 * model's n_embd / n_head is not handled); embeddings times
		 * sqrt(n_embd); no final logit softcapping.
		 */
		snprintf(key, sizeof(key), "%s.attention.sliding_window", a);
		st = opus_gguf_get_i64(g, key, &swa, err);
		if (st != OPUS_OK && st != OPUS_ERR_NOT_FOUND)
			return st;
		if (st == OPUS_ERR_NOT_FOUND)
			swa = 0;
		if (swa < 0 || swa > (1 << 24))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "model metadata \"%s\" = %lld out of range 0..%d",
								  key, (long long) swa, 1 << 24);
		hp->n_swa = (int32_t) swa;
		hp->swa_pattern = swa > 0 ? 6 : 0;
		hp->rope_freq_base_swa = 10000.0f;
		hp->attn_scale = 1.0f / sqrtf((float) hp->head_dim);
		hp->embd_scale = sqrtf((float) hp->n_embd);
		if (hp->n_layer == 62)
			return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
								  "gemma3 27B (query scale from n_embd / n_head) is not supported");
	}
	return opus_moe_read_hparams(g, hp, err);
}

enum opus_status
opus_model_load(const char *path, const struct opus_load_params *params,
				struct opus_model **out, struct opus_error *err)
{
	struct opus_model *m;
	struct opus_hparams *hp;
	struct opus_gguf *g = NULL;
	enum opus_status st;
	int64_t		q_dim,
				kv_dim,
				n_floats;
	float	   *fp;
	bool		found;
	char		name[96];
	int64_t		type_elems[OPUS_TYPE__COUNT] = {0};

	*out = NULL;
	opus_qtype_init_cpu(false);
	m = calloc(1, sizeof(*m));
	if (!m)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading model");
	hp = &m->hp;

	st = opus_gguf_open(path, &g, err);
	if (st != OPUS_OK)
		goto fail;
	m->gguf = g;
	if ((st = read_hparams(g, path, hp, err)) != OPUS_OK)
		goto fail;
	q_dim = (int64_t) hp->n_head * hp->head_dim;
	kv_dim = (int64_t) hp->n_head_kv * hp->head_dim;

	/* embeddings, vocabulary */
	{
		const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, "token_embd.weight");

		if (!t)
		{
			st = opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"token_embd.weight\"");
			goto fail;
		}
		if (t->ne[1] < 1 || t->ne[1] > INT32_MAX)
		{
			st = opus_error_set(err, OPUS_ERR_FORMAT, "tensor \"token_embd.weight\" has a bad vocabulary size");
			goto fail;
		}
		hp->n_vocab = (int32_t) t->ne[1];
	}
	if ((st = opus_find_matrix(g, "token_embd.weight", hp->n_embd, hp->n_vocab,
						  true, &m->tok_embd, err)) != OPUS_OK)
		goto fail;
	if ((st = opus_find_matrix(g, "output.weight", hp->n_embd, hp->n_vocab,
						  false, &m->output, err)) != OPUS_OK)
		goto fail;
	if (!m->output.data)
	{
		m->output = m->tok_embd;
		hp->tied_embeddings = true;
	}
	if (hp->is_encoder)
	{
		if ((st = opus_bert_load(m, err)) != OPUS_OK)
			goto fail;
		goto loaded;
	}

	/* f32 vectors: output_norm, rope_freqs, 2 norms + 3 biases + q/k norms per layer */
	n_floats = hp->n_embd + hp->rope_dim / 2 +
		(int64_t) hp->n_layer * (4 * hp->n_embd + 2 * q_dim + 3 * kv_dim);
	m->owned = malloc((size_t) n_floats * sizeof(float));
	m->layers = calloc(hp->n_layer, sizeof(struct opus_layer));
	if (!m->owned || !m->layers)
	{
		st = opus_error_set(err, OPUS_ERR_NOMEM, "out of memory loading model");
		goto fail;
	}
	fp = m->owned;
	m->output_norm = fp;
	fp += hp->n_embd;
	if ((st = opus_load_vector(g, "output_norm.weight", hp->n_embd, true,
						  m->output_norm, &found, err)) != OPUS_OK)
		goto fail;
	if ((st = opus_load_vector(g, "rope_freqs.weight", hp->rope_dim / 2, false,
						  fp, &found, err)) != OPUS_OK)
		goto fail;
	if (found)
	{
		m->rope_freqs = fp;
		hp->has_rope_freqs = true;
		for (int i = 0; i < hp->rope_dim / 2; i++)
		{
			if (!(fp[i] > 0.0f))
			{
				st = opus_error_set(err, OPUS_ERR_FORMAT,
									"tensor \"rope_freqs.weight\" holds a non-positive factor");
				goto fail;
			}
		}
	}
	fp += hp->rope_dim / 2;

	for (int il = 0; il < hp->n_layer; il++)
	{
		struct opus_layer *L = &m->layers[il];
		bool		bias = (hp->arch == OPUS_ARCH_QWEN2);
		int64_t		qn = hp->arch == OPUS_ARCH_OLMOE ? q_dim : hp->head_dim;
		int64_t		kn = hp->arch == OPUS_ARCH_OLMOE ? kv_dim : hp->head_dim;
		bool		gemma = (hp->arch == OPUS_ARCH_GEMMA3);
		bool		qk_norm = (hp->arch == OPUS_ARCH_QWEN3MOE || hp->arch == OPUS_ARCH_OLMOE ||
							   gemma);

#define TN(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
		L->attn_norm = fp;
		fp += hp->n_embd;
		L->ffn_norm = fp;
		fp += hp->n_embd;
		if ((st = opus_load_vector(g, TN("attn_norm.weight"), hp->n_embd, true,
							  L->attn_norm, &found, err)) ||
			(st = opus_load_vector(g, TN("ffn_norm.weight"), hp->n_embd, true,
							  L->ffn_norm, &found, err)) ||
			(st = opus_find_matrix(g, TN("attn_q.weight"), hp->n_embd, q_dim, true, &L->wq, err)) ||
			(st = opus_find_matrix(g, TN("attn_k.weight"), hp->n_embd, kv_dim, true, &L->wk, err)) ||
			(st = opus_find_matrix(g, TN("attn_v.weight"), hp->n_embd, kv_dim, true, &L->wv, err)) ||
			(st = opus_find_matrix(g, TN("attn_output.weight"), q_dim, hp->n_embd, true, &L->wo, err)))
			goto fail;
		/* gemma3: norms on the outputs of attention and feed-forward */
		L->attn_post_norm = fp;
		fp += hp->n_embd;
		L->ffn_post_norm = fp;
		fp += hp->n_embd;
		if ((st = opus_load_vector(g, TN("post_attention_norm.weight"), hp->n_embd, gemma,
							  L->attn_post_norm, &found, err)) ||
			(st = opus_load_vector(g, TN("post_ffw_norm.weight"), hp->n_embd, gemma,
							  L->ffn_post_norm, &found, err)))
			goto fail;
		if (!gemma)
			L->attn_post_norm = L->ffn_post_norm = NULL;
		L->swa = hp->n_swa > 0 && il % hp->swa_pattern < hp->swa_pattern - 1;
		if (hp->n_expert == 0)
		{
			if ((st = opus_find_matrix(g, TN("ffn_gate.weight"), hp->n_embd, hp->n_ff, true, &L->w_gate, err)) ||
				(st = opus_find_matrix(g, TN("ffn_up.weight"), hp->n_embd, hp->n_ff, true, &L->w_up, err)) ||
				(st = opus_find_matrix(g, TN("ffn_down.weight"), hp->n_ff, hp->n_embd, true, &L->w_down, err)))
				goto fail;
		}
		else
		{
			/* router, the qwen2moe shared expert's gate, the experts */
			if ((st = opus_find_matrix(g, TN("ffn_gate_inp.weight"), hp->n_embd, hp->n_expert, true,
								  &L->router, err)) ||
				(st = opus_find_matrix(g, TN("ffn_gate_inp_shexp.weight"), hp->n_embd, 1,
								  hp->arch == OPUS_ARCH_QWEN2MOE, &L->shexp_gate, err)))
				goto fail;
			if ((st = opus_moe_load_layer(g, hp, il, &L->moe, err)) != OPUS_OK)
				goto fail;
			L->is_moe = true;
		}
		/* q/k norms: per head (qwen3moe) or over the whole projection (olmoe) */
		L->attn_q_norm = fp;
		if ((st = opus_load_vector(g, TN("attn_q_norm.weight"), qn, qk_norm, fp, &found, err)))
			goto fail;
		L->attn_q_norm = qk_norm ? fp : NULL;
		fp += q_dim;
		L->attn_k_norm = fp;
		if ((st = opus_load_vector(g, TN("attn_k_norm.weight"), kn, qk_norm, fp, &found, err)))
			goto fail;
		L->attn_k_norm = qk_norm ? fp : NULL;
		fp += kv_dim;
		/* biases: required for qwen2, used if present for llama */
		L->bq = fp;
		if ((st = opus_load_vector(g, TN("attn_q.bias"), q_dim, bias, fp, &found, err)))
			goto fail;
		if (!found)
			L->bq = NULL;
		fp += q_dim;
		L->bk = fp;
		if ((st = opus_load_vector(g, TN("attn_k.bias"), kv_dim, bias, fp, &found, err)))
			goto fail;
		if (!found)
			L->bk = NULL;
		fp += kv_dim;
		L->bv = fp;
		if ((st = opus_load_vector(g, TN("attn_v.bias"), kv_dim, bias, fp, &found, err)))
			goto fail;
		if (!found)
			L->bv = NULL;
		fp += kv_dim;
#undef TN
	}

loaded:
	/* parameter count and the dominant weight type */
	for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
	{
		const struct opus_gguf_tensor *t = opus_gguf_tensor_at(g, i);
		int64_t		ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];

		hp->n_params += ne;
		if (t->ne[1] > 1 && (unsigned) t->type < OPUS_TYPE__COUNT)
			type_elems[t->type] += ne;
	}
	hp->main_type = OPUS_TYPE_F32;
	for (int i = 0; i < OPUS_TYPE__COUNT; i++)
	{
		if (type_elems[i] > type_elems[hp->main_type])
			hp->main_type = (enum opus_qtype) i;
	}

	/* tokenizer */
	if ((st = opus_tokenizer_load(g, &m->tok, err)) != OPUS_OK)
		goto fail;
	if (opus_tokenizer_n_vocab(m->tok) > hp->n_vocab)
	{
		st = opus_error_set(err, OPUS_ERR_FORMAT,
							"tokenizer has %d tokens but the embedding only %d",
							opus_tokenizer_n_vocab(m->tok), hp->n_vocab);
		goto fail;
	}

	/* identity: file size and everything before the first tensor's data */
	{
		const uint8_t *base = opus_gguf_base(g);
		size_t		fsize = opus_gguf_size(g);
		size_t		hdr = fsize;
		uint64_t	h = 1469598103934665603ULL;

		for (int64_t i = 0; i < opus_gguf_n_tensors(g); i++)
		{
			size_t		off = (size_t) ((const uint8_t *) opus_gguf_tensor_at(g, i)->data - base);

			if (off < hdr)
				hdr = off;
		}
		h = fnv1a(h, &fsize, sizeof(fsize));
		m->identity = fnv1a(h, base, hdr);
	}

	if (params && params->use_mlock)
	{
		/* best effort: lock the mapping so weights are never paged out */
		(void) mlock(opus_gguf_base(g), opus_gguf_size(g));
	}

	*out = m;
	return OPUS_OK;

fail:
	opus_model_free(m);
	return st;
}

void
opus_model_free(struct opus_model *m)
{
	if (!m)
		return;
	if (m->tok)
		opus_tokenizer_free(m->tok);
	if (m->gguf)
		opus_gguf_close(m->gguf);
	for (int il = 0; m->layers && il < m->hp.n_layer; il++)
		if (m->layers[il].is_moe)
			opus_moe_unload_layer(&m->layers[il].moe);
	opus_bert_free(m->bert);
	free(m->layers);
	free(m->owned);
	free(m);
}

const struct opus_hparams *
opus_model_hparams(const struct opus_model *m)
{
	return &m->hp;
}

const struct opus_tokenizer *
opus_model_tokenizer(const struct opus_model *m)
{
	return m->tok;
}

const char *
opus_model_chat_template(const struct opus_model *m, size_t *len)
{
	const char *s;
	size_t		n;

	if (opus_gguf_get_str(m->gguf, "tokenizer.chat_template", &s, &n, NULL) != OPUS_OK)
	{
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = n;
	return s;
}

uint64_t
opus_model_identity(const struct opus_model *m)
{
	return m->identity;
}

/* ---- context ---- */

size_t
opus_ctx_kv_bytes(const struct opus_model *m, const struct opus_ctx_params *p)
{
	size_t		bb = opus_kv_block_bytes(&m->hp, p->block_size > 0 ? p->block_size : 16,
										 p->kv_type);
	unsigned long long total;

	if (p->n_blocks < 0 ||
		opus_mul_overflow_u64(bb, (unsigned long long) p->n_blocks, &total) ||
		total > SIZE_MAX)
		return SIZE_MAX;
	return (size_t) total;
}

enum opus_status
opus_ctx_create(struct opus_model *m, const struct opus_ctx_params *p,
				struct opus_ctx **out, struct opus_error *err)
{
	struct opus_ctx *c;
	enum opus_status st;

	*out = NULL;
	if (p->n_threads < 1 || p->n_threads > OPUS_MAX_THREADS)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "thread count %d out of range 1..%d",
							  p->n_threads, OPUS_MAX_THREADS);
	if (p->max_batch_tokens < 1 || p->max_batch_tokens > (1 << 20))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "max batch tokens %d out of range", p->max_batch_tokens);
	if (p->n_ctx < 1 || p->n_ctx > (1 << 24))
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "context size %d out of range", p->n_ctx);
	if (p->block_size < 0 || p->block_size > 4096)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "block size %d out of range", p->block_size);
	if (p->n_blocks < 1 || p->n_blocks > INT32_MAX)
		return opus_error_set(err, OPUS_ERR_INVALID_ARG,
							  "kv block count %lld out of range", (long long) p->n_blocks);

	if (m->hp.is_encoder)
		return opus_error_set(err, OPUS_ERR_UNSUPPORTED,
							  "\"%s\" is an embedding model: it encodes (opus_encode), it does not generate",
							  m->hp.name);
	c = calloc(1, sizeof(*c));
	if (!c)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory creating context");
	c->model = m;
	c->params = *p;
	if (c->params.block_size == 0)
		c->params.block_size = 16;
	if (m->hp.n_expert > 0)
	{
		c->expert_load = calloc((size_t) m->hp.n_layer * (size_t) m->hp.n_expert,
								sizeof(uint64_t));
		if (!c->expert_load)
		{
			opus_ctx_free(c);
			return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory creating context");
		}
	}
	if ((st = opus_backend_select(&p->device, &c->ops, err)) != OPUS_OK ||
		(st = opus_kv_init(&c->kv, &m->hp, &c->params, err)) != OPUS_OK ||
		(st = c->ops->create(c, err)) != OPUS_OK)
	{
		opus_ctx_free(c);
		return st;
	}
	*out = c;
	return OPUS_OK;
}

void
opus_ctx_free(struct opus_ctx *c)
{
	if (!c)
		return;
	if (c->ops)
		c->ops->destroy(c);
	opus_kv_destroy(&c->kv);
	free(c->expert_load);
	free(c);
}

int64_t
opus_ctx_free_blocks(const struct opus_ctx *c)
{
	return c->kv.n_free;
}

/* ---- Mixture-of-Experts statistics ---- */

const uint64_t *
opus_ctx_expert_load(const struct opus_ctx *c, int32_t *n_layer, int32_t *n_expert)
{
	bool		moe = c->expert_load != NULL;

	*n_layer = moe ? c->model->hp.n_layer : 0;
	*n_expert = moe ? c->model->hp.n_expert : 0;
	return c->expert_load;
}

void
opus_ctx_expert_load_reset(struct opus_ctx *c)
{
	if (c->expert_load)
		memset(c->expert_load, 0, sizeof(uint64_t) * (size_t) c->model->hp.n_layer *
			   (size_t) c->model->hp.n_expert);
}

void
opus_ctx_moe_io_stats(const struct opus_ctx *c, struct opus_moe_io_stats *out)
{
	*out = c->moe_io;
}

struct opus_kv *
opus_ctx_kv(struct opus_ctx *c)
{
	return &c->kv;
}

const struct opus_model *
opus_ctx_model(const struct opus_ctx *c)
{
	return c->model;
}

const struct opus_ctx_params *
opus_ctx_params(const struct opus_ctx *c)
{
	return &c->params;
}

struct opus_pool *
opus_ctx_pool(const struct opus_ctx *c)
{
	return c->pool;
}
