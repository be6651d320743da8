/* quant_ref.c - placeholder; the quant work replaces it. */
#include "quant_kernels.h"

void
opus_quant_register_ref(struct opus_qtype_info *table)
{
	(void) table;
}
