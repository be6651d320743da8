/* quant_avx2.c - placeholder; the quant work replaces it. */
#include "quant_kernels.h"

void
opus_quant_register_avx2(struct opus_qtype_info *table)
{
	(void) table;
}
