/*
 * quant_kernels.h - internal: how quant_ref.c and quant_avx2.c plug their
 * kernels into the type table (qtype.c).  Not for use outside those files.
 *
 * opus_quant_register_ref fills, for every supported type, vec_dot_type,
 * supported = true, the *_ref pointers and the chosen pointers (= ref).
 * opus_quant_register_avx2 then overrides the chosen pointers (to_float,
 * from_float, vec_dot) where it has a faster version; it never touches *_ref.
 * The table has OPUS_TYPE__COUNT entries indexed by type id.
 */
#ifndef OPUS_QUANT_KERNELS_H
#define OPUS_QUANT_KERNELS_H

#include "quant/qtype.h"

void		opus_quant_register_ref(struct opus_qtype_info *table);
void		opus_quant_register_avx2(struct opus_qtype_info *table);

/*
 * Register `rows` as the several-rows form of `dot` (opus_vec_dot_rows);
 * called by opus_quant_register_avx2, the registry is emptied by every
 * opus_qtype_init_cpu.
 */
void		opus_quant_register_rows(opus_vec_dot_fn dot, opus_vec_dot_rows_fn rows);
/* the same for tile kernels (opus_vec_dot_tile); one also serves as rows form */
void		opus_quant_register_tile(opus_vec_dot_fn dot, opus_vec_dot_tile_fn tile);

/* the K-quant multi-token order (opus_vec_dot_llama_batch), AVX2 versions */
float		opus_q4_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x);
float		opus_q4_K_vec_dot_gemv_avx2(int64_t n, const void *w, const void *x);
float		opus_q4_K_vec_dot_ggml_avx2(int64_t n, const void *w, const void *x);
float		opus_q5_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x);
float		opus_q6_K_vec_dot_tiled_avx2(int64_t n, const void *w, const void *x);

#endif							/* OPUS_QUANT_KERNELS_H */
