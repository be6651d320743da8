/*
 * model_moe.h - internal: loading the Mixture-of-Experts parts of a model
 * (hyperparameters and expert tensors) for model.c.  The dispatch itself is
 * moe.c; this file only knows GGUF names and shapes.
 */
#ifndef OPUS_MODEL_MOE_H
#define OPUS_MODEL_MOE_H

#include "format/gguf.h"
#include "model/model.h"
#include "model/moe.h"

/*
 * Read `<arch>.expert_count` and friends into hp (all zero for a dense
 * model).  The architecture's routing rule is set here: softmax over all
 * experts then top-k for all four MoE families; the k weights renormalised
 * for llama (Mixtral) and qwen3moe, not for qwen2moe and olmoe, unless
 * `<arch>.expert_weights_norm` says otherwise; scaled by
 * `<arch>.expert_weights_scale` when present and not 0.
 */
enum opus_status opus_moe_read_hparams(const struct opus_gguf *g,
									   struct opus_hparams *hp,
									   struct opus_error *err);

/*
 * Point ex at layer il's experts: stacked blk.N.ffn_{gate,up,down}_exps or
 * per-expert blk.N.ffn_{gate,up,down}.E tensors, plus the qwen2moe shared
 * expert blk.N.ffn_{gate,up,down}_shexp.  Allocates the descriptor array
 * (release with opus_moe_unload_layer).
 */
enum opus_status opus_moe_load_layer(const struct opus_gguf *g,
									 const struct opus_hparams *hp, int il,
									 struct opus_moe_experts *ex,
									 struct opus_error *err);
void		opus_moe_unload_layer(struct opus_moe_experts *ex);

#endif							/* OPUS_MODEL_MOE_H */
