/*
 * model_moe.c - the Mixture-of-Experts hyperparameters and expert tensors of
 * a GGUF model (see model_moe.h).  Every shape and type is checked here and
 * in opus_moe_experts_finish, so the dispatch can trust the descriptors.
 */
#include "model/model_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `<arch>.<suffix>` as an integer; absent: *found false. */
static enum opus_status
get_int(const struct opus_gguf *g, const char *arch, const char *suffix,
		int64_t *out, bool *found, struct opus_error *err)
{
	char		key[128];
	enum opus_status st;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	st = opus_gguf_get_i64(g, key, out, err);
	*found = (st == OPUS_OK);
	return st == OPUS_ERR_NOT_FOUND ? OPUS_OK : st;
}

enum opus_status
opus_moe_read_hparams(const struct opus_gguf *g, struct opus_hparams *hp,
					  struct opus_error *err)
{
	const char *a = hp->arch_name;
	int64_t		v;
	bool		found;
	enum opus_status st;
	char		key[128];

	hp->n_expert = 0;
	hp->n_expert_used = 0;
	hp->n_ff_exp = 0;
	hp->n_ff_shexp = 0;
	hp->expert_weights_norm = false;
	hp->expert_weights_scale = 1.0f;

	if ((st = get_int(g, a, "expert_count", &v, &found, err)) != OPUS_OK)
		return st;
	if (!found || v == 0)
	{
		if (hp->arch == OPUS_ARCH_QWEN2MOE || hp->arch == OPUS_ARCH_QWEN3MOE ||
			hp->arch == OPUS_ARCH_OLMOE)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "a %s model needs \"%s.expert_count\"", a, a);
		return OPUS_OK;			/* dense */
	}
	if (v < 1 || v > OPUS_MOE_MAX_EXPERTS)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "model metadata \"%s.expert_count\" = %lld out of range 1..%d",
							  a, (long long) v, OPUS_MOE_MAX_EXPERTS);
	hp->n_expert = (int32_t) v;
	if ((st = get_int(g, a, "expert_used_count", &v, &found, err)) != OPUS_OK)
		return st;
	if (!found || v < 1 || v > hp->n_expert || v > OPUS_MOE_MAX_USED)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "model metadata \"%s.expert_used_count\" missing or out of range 1..%d",
							  a, hp->n_expert < OPUS_MOE_MAX_USED ? hp->n_expert : OPUS_MOE_MAX_USED);
	hp->n_expert_used = (int32_t) v;

	/* expert width: its own key (qwen*), else feed_forward_length */
	if ((st = get_int(g, a, "expert_feed_forward_length", &v, &found, err)) != OPUS_OK)
		return st;
	if (found && v != 0)
	{
		if (v < 1 || v > (1 << 22))
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "model metadata \"%s.expert_feed_forward_length\" out of range", a);
		hp->n_ff_exp = (int32_t) v;
	}
	else if (hp->arch == OPUS_ARCH_QWEN2MOE || hp->arch == OPUS_ARCH_QWEN3MOE)
		hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
	else
		hp->n_ff_exp = hp->n_ff;
	if (hp->n_ff_exp < 1)
		return opus_error_set(err, OPUS_ERR_FORMAT, "expert feed-forward length is 0");

	if (hp->arch == OPUS_ARCH_QWEN2MOE)
	{
		if ((st = get_int(g, a, "expert_shared_feed_forward_length", &v, &found, err)) != OPUS_OK)
			return st;
		hp->n_ff_shexp = found && v != 0 ? (int32_t) (v > (1 << 22) ? -1 : v) : hp->n_ff;
		if (hp->n_ff_shexp < 1)
			return opus_error_set(err, OPUS_ERR_FORMAT,
								  "model metadata \"%s.expert_shared_feed_forward_length\" out of range", a);
	}

	/* routing rule: renormalisation per architecture, unless the file says */
	hp->expert_weights_norm = (hp->arch == OPUS_ARCH_LLAMA || hp->arch == OPUS_ARCH_QWEN3MOE);
	snprintf(key, sizeof(key), "%s.expert_weights_norm", a);
	{
		bool		b;

		st = opus_gguf_get_bool(g, key, &b, err);
		if (st == OPUS_OK)
			hp->expert_weights_norm = b;
		else if (st != OPUS_ERR_NOT_FOUND)
			return st;
	}
	snprintf(key, sizeof(key), "%s.expert_weights_scale", a);
	{
		float		f;

		st = opus_gguf_get_f32(g, key, &f, err);
		if (st == OPUS_OK)
		{
			if (!isfinite(f) || f < 0.0f)
				return opus_error_set(err, OPUS_ERR_FORMAT, "bad \"%s\"", key);
			hp->expert_weights_scale = f == 0.0f ? 1.0f : f;
		}
		else if (st != OPUS_ERR_NOT_FOUND)
			return st;
	}
	return OPUS_OK;
}

/* One 2-D expert matrix [n_out][n_in] into dst. */
static enum opus_status
load_mat(const struct opus_gguf *g, const char *name, int64_t n_in, int64_t n_out,
		 struct opus_moe_mat *dst, struct opus_error *err)
{
	const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, name);

	if (!t)
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"%s\"", name);
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" has shape [%lld, %lld, %lld], expected [%lld, %lld]",
							  name, (long long) t->ne[0], (long long) t->ne[1],
							  (long long) t->ne[2], (long long) n_in, (long long) n_out);
	return opus_moe_mat_set(dst, t->data, t->nbytes, t->type, n_in, n_out, err);
}

/* A stacked [n_in, n_out, n_expert] tensor into dst[0..n_expert-1]. */
static enum opus_status
load_stack(const struct opus_gguf *g, const char *name, int64_t n_in, int64_t n_out,
		   int32_t n_expert, struct opus_moe_mat *dst, struct opus_error *err)
{
	const struct opus_gguf_tensor *t = opus_gguf_find_tensor(g, name);

	if (!t)
		return opus_error_set(err, OPUS_ERR_FORMAT, "missing tensor \"%s\"", name);
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1)
		return opus_error_set(err, OPUS_ERR_FORMAT,
							  "tensor \"%s\" has shape [%lld, %lld, %lld], expected [%lld, %lld, %d]",
							  name, (long long) t->ne[0], (long long) t->ne[1],
							  (long long) t->ne[2], (long long) n_in, (long long) n_out, n_expert);
	return opus_moe_mats_stacked(dst, n_expert, t->data, t->nbytes, t->type, n_in, n_out, err);
}

enum opus_status
opus_moe_load_layer(const struct opus_gguf *g, const struct opus_hparams *hp, int il,
					struct opus_moe_experts *ex, struct opus_error *err)
{
	static const char *const proj[3] = {"gate", "up", "down"};
	bool		shared = (hp->arch == OPUS_ARCH_QWEN2MOE);
	int			n_all = hp->n_expert + (shared ? 1 : 0);
	struct opus_moe_mat *mats;
	char		name[128];
	enum opus_status st = OPUS_OK;
	bool		stacked;

	memset(ex, 0, sizeof(*ex));
	mats = calloc((size_t) n_all * 3, sizeof(*mats));
	if (!mats)
		return opus_error_set(err, OPUS_ERR_NOMEM, "out of memory for expert tables");
	ex->gate = mats;
	ex->up = mats + n_all;
	ex->down = mats + 2 * n_all;
	ex->n_expert = hp->n_expert;
	ex->n_used = hp->n_expert_used;
	ex->n_embd = hp->n_embd;
	ex->gating = OPUS_MOE_GATING_SOFTMAX;
	ex->norm_weights = hp->expert_weights_norm;
	ex->weight_scale = hp->expert_weights_scale;
	ex->has_shared = shared;
	ex->shared_gated = shared;

	snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", il);
	stacked = opus_gguf_find_tensor(g, name) != NULL;
	for (int p = 0; p < 3 && st == OPUS_OK; p++)
	{
		struct opus_moe_mat *dst = mats + (size_t) p * n_all;
		int64_t		n_in = p == 2 ? hp->n_ff_exp : hp->n_embd;
		int64_t		n_out = p == 2 ? hp->n_embd : hp->n_ff_exp;

		if (stacked)
		{
			snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, proj[p]);
			st = load_stack(g, name, n_in, n_out, hp->n_expert, dst, err);
		}
		else
			for (int e = 0; e < hp->n_expert && st == OPUS_OK; e++)
			{
				snprintf(name, sizeof(name), "blk.%d.ffn_%s.%d.weight", il, proj[p], e);
				st = load_mat(g, name, n_in, n_out, &dst[e], err);
			}
		if (st == OPUS_OK && shared)
		{
			snprintf(name, sizeof(name), "blk.%d.ffn_%s_shexp.weight", il, proj[p]);
			st = load_mat(g, name, p == 2 ? hp->n_ff_shexp : hp->n_embd,
						  p == 2 ? hp->n_embd : hp->n_ff_shexp, &dst[hp->n_expert], err);
		}
	}
	if (st == OPUS_OK)
		st = opus_moe_experts_finish(ex, err);
	if (st != OPUS_OK)
		opus_moe_unload_layer(ex);
	return st;
}

void
opus_moe_unload_layer(struct opus_moe_experts *ex)
{
	opus_moe_experts_release(ex);
	free(ex->gate);				/* the one allocation of all descriptors */
	ex->gate = ex->up = ex->down = NULL;
}
