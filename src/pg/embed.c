/*
 * embed.c - opus_embed(input, model, normalize, truncate, input_type) ->
 * real[]: the sentence embedding of input from an embedding (encoder)
 * model, as the engine's EMBED request gives it (docs/embeddings.md), with
 * the query or document prefix the model's declaration gives sent before
 * the input (request.c writes it); and the shapes of
 * an EMBEDDING result (real[], the OpenAI embeddings object) that
 * opus_embed_many and the asynchronous opus_result_embedding /
 * opus_result_completion share.
 *
 * An input longer than the model's context raises 54000 unless truncate
 * (then its first tokens and the last, [SEP], are kept); asking a text
 * generation model for an embedding raises 0A000 (the engine's refusal),
 * as opus_generate does on an embedding model.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "opus_pg.h"

PG_FUNCTION_INFO_V1(opus_embed);

/*
 * The prefix model entry req->model declares for input_type ("query" or
 * "document", NULL = not given) into req: none when the model declares
 * none; 22023 for another input_type, or for none when the model has
 * prefixes (so that a caller cannot forget them).
 */
static void
embed_prefix(const char *input_type, OpusRequest *req)
{
	OpusEngineStatus *e = OpusModel(req->model);
	char		query[OPUS_EMBED_PREFIX_LEN];
	char		document[OPUS_EMBED_PREFIX_LEN];
	char	   *prefix;

	if (input_type && strcmp(input_type, "query") != 0 && strcmp(input_type, "document") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("input_type must be 'query' or 'document'")));
	SpinLockAcquire(&e->mutex);
	strlcpy(query, e->query_prefix, sizeof(query));
	strlcpy(document, e->document_prefix, sizeof(document));
	SpinLockRelease(&e->mutex);
	req->prefix = NULL;
	req->prefix_len = 0;
	if (query[0] == '\0' && document[0] == '\0')
		return;
	if (input_type == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("this embedding model needs input_type 'query' or 'document'"),
				 errdetail("Its declaration in opus.models gives query and document prefixes."),
				 errhint("Pass input_type => 'query' for a search query, 'document' for text to be searched.")));
	prefix = pstrdup(strcmp(input_type, "query") == 0 ? query : document);
	req->prefix = prefix;
	req->prefix_len = strlen(prefix);
}

/*
 * The EMBED options of an opus_embed* call into req: "normalize" (NULL or
 * absent = true), truncate (NULL or absent = false), input_type (the
 * model's prefix, embed_prefix); the model never falls back (a fallback
 * model need not embed at all).
 */
void
OpusParseEmbedArgs(FunctionCallInfo fcinfo, OpusRequest *req)
{
	int			norm = OpusArgNo(fcinfo, "normalize");
	int			trunc = OpusArgNo(fcinfo, "truncate");
	int			itype = OpusArgNo(fcinfo, "input_type");

	req->params.max_tokens = 1;
	req->params.temperature = 0.0f;
	req->params.top_p = 1.0f;
	req->params.repetition_penalty = 1.0f;
	OpusParseModelArg(fcinfo, req);
	req->fallback = 0;
	req->embed_flags = 0;
	if (norm < 0 || PG_ARGISNULL(norm) || PG_GETARG_BOOL(norm))
		req->embed_flags |= OPUS_PROTO_EMBED_NORMALIZE;
	if (trunc >= 0 && !PG_ARGISNULL(trunc) && PG_GETARG_BOOL(trunc))
		req->embed_flags |= OPUS_PROTO_EMBED_TRUNCATE;
	embed_prefix(itype >= 0 && !PG_ARGISNULL(itype) ? text_to_cstring(PG_GETARG_TEXT_PP(itype)) : NULL, req);
}

/*
 * An EMBEDDING result as the OpenAI embeddings response object: {"object":
 * "list", "data": [{"object": "embedding", "index": 0, "embedding": [...]}],
 * "model", "model_version", "usage"}.  Each value is written with 9
 * significant digits, so it reads back (::real) as the very same float.
 */
Datum
OpusEmbeddingJsonb(const OpusResult *res)
{
	StringInfoData buf;
	uint32		n;
	uint32		i;

	if (res->len == 0 || res->len % 4 != 0)
		elog(ERROR, "opus_pg: embedding result of %u bytes is not a vector of floats", res->len);
	n = res->len / 4;
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"object\": \"list\", \"data\": [{\"object\": \"embedding\", \"index\": 0, \"embedding\": [");
	for (i = 0; i < n; i++)
	{
		uint32		u = opus_proto_get_u32((const uint8_t *) res->data + 4 * i);
		float		f;

		memcpy(&f, &u, sizeof(f));
		appendStringInfo(&buf, i ? ", %.9g" : "%.9g", (double) f);
	}
	appendStringInfoString(&buf, "]}], \"model\": ");
	escape_json(&buf, OpusServedModelName(res->served_model));
	appendStringInfo(&buf, ", \"model_version\": %d, \"usage\": {\"prompt_tokens\": %d, \"total_tokens\": %d}, "
					 "\"timings\": {\"queue_ms\": %.3f, \"engine_ms\": %.3f, \"total_ms\": %.3f}}",
					 res->served_version, res->n_prompt, res->n_prompt,
					 res->queue_ms, res->total_ms, res->elapsed_ms);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/* An EMBEDDING result (little-endian f32) as a real[] datum. */
Datum
OpusEmbeddingArray(const char *data, uint32 len)
{
	Datum	   *elems;
	ArrayType  *arr;
	int			n;
	int			i;

	if (len == 0 || len % 4 != 0)
		elog(ERROR, "opus_pg: embedding result of %u bytes is not a vector of floats", len);
	n = (int) (len / 4);
	elems = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		uint32		u = opus_proto_get_u32((const uint8_t *) data + 4 * i);
		float4		f;

		memcpy(&f, &u, sizeof(f));
		elems[i] = Float4GetDatum(f);
	}
	arr = construct_array(elems, n, FLOAT4OID, sizeof(float4), true, TYPALIGN_INT);
	pfree(elems);
	return PointerGetDatum(arr);
}

/*
 * The EMBED request of an opus_embed / opus_submit_embed call: its first
 * argument (the input, 22004 if NULL, 54000 if too large) and its options.
 */
void
OpusParseEmbedRequest(FunctionCallInfo fcinfo, OpusRequest *req)
{
	text	   *t;

	OpusCheckPreloaded();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("input to embed must not be null")));
	memset(req, 0, sizeof(*req));
	req->kind = OPUS_KIND_EMBED;
	t = PG_GETARG_TEXT_PP(0);
	req->text = OpusTextToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &req->text_len);
	OpusCheckPromptSize(req->text_len, "input to embed is");
	OpusParseEmbedArgs(fcinfo, req);
}

Datum
opus_embed(PG_FUNCTION_ARGS)
{
	OpusRequest req;
	OpusResult	res;

	OpusParseEmbedRequest(fcinfo, &req);
	OpusRunRequest(&req, &res);
	PG_RETURN_DATUM(OpusEmbeddingArray(res.data, res.len));
}
