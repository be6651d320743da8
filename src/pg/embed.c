/*
 * embed.c - opus_embed(input, model, normalize, truncate) -> real[]: the
 * sentence embedding of input from an embedding (encoder) model, as the
 * engine's EMBED request gives it (docs/embeddings.md).
 *
 * An input longer than the model's context raises 54000 unless truncate
 * (then its first tokens and the last, [SEP], are kept); asking a text
 * generation model for an embedding raises 0A000 (the engine's refusal),
 * as opus_generate does on an embedding model.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_embed);

Datum
opus_embed(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;
	Datum	   *elems;
	int			n;
	int			i;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("input to embed must not be null")));
	memset(&req, 0, sizeof(req));
	req.kind = OPUS_KIND_EMBED;
	req.params.max_tokens = 1;
	req.params.temperature = 0.0f;
	req.params.top_p = 1.0f;
	req.params.repetition_penalty = 1.0f;
	{
		text	   *t = PG_GETARG_TEXT_PP(0);

		req.text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req.text_len);
	}
	OpusCheckPromptSize(req.text_len, "input to embed is");
	OpusParseModelArg(fcinfo, &req);
	req.fallback = 0;			/* a fallback model need not embed at all */
	if (PG_NARGS() < 3 || PG_ARGISNULL(2) || PG_GETARG_BOOL(2))
		req.embed_flags |= OPUS_PROTO_EMBED_NORMALIZE;
	if (PG_NARGS() >= 4 && !PG_ARGISNULL(3) && PG_GETARG_BOOL(3))
		req.embed_flags |= OPUS_PROTO_EMBED_TRUNCATE;
	OpusRunRequest(&req, &res);

	if (res.len == 0 || res.len % 4 != 0)
		elog(ERROR, "opus_pg: embedding result of %u bytes is not a vector of floats", res.len);
	n = (int) (res.len / 4);
	elems = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		uint32		u = opus_proto_get_u32((const uint8_t *) res.data + 4 * i);
		float4		f;

		memcpy(&f, &u, sizeof(f));
		elems[i] = Float4GetDatum(f);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, n, FLOAT4OID, sizeof(float4),
										  true, TYPALIGN_INT));
}
