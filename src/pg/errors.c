/*
 * errors.c - the one mapping from engine status codes (OPUS_PROTO_ERR_*,
 * the numbers of src/engine/base/status.h as they travel over the wire) and the
 * supervisor's own failure codes (OPUS_PG_ERR_*) to SQLSTATEs.
 *
 *   invalid argument, bad token id, bad chat messages   22023
 *   prompt longer than the context / KV cache, result
 *   larger than opus.request_buffer_size                54000
 *   out of memory                                       53200
 *   unsupported (architecture, template, device)        0A000
 *   cancelled                                           57014
 *   engine died / cannot start / model failed to load   58000
 *   model file or engine binary not found               58P01
 *   no such model (removed while the request waited)     42704
 *   model does not fit opus.memory_budget               53200
 *   anything else (internal, protocol)                  XX000
 *
 * Messages are lower case without a final period; the engine's own message
 * travels as the DETAIL when the message here is our summary.
 */
#include "postgres.h"

#include "opus_pg.h"

int
OpusSqlstateFor(int err_code)
{
	switch (err_code)
	{
		case OPUS_PROTO_ERR_INVALID_ARG:
		case OPUS_PROTO_ERR_TOKENIZE:
		case OPUS_PROTO_ERR_TEMPLATE:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case OPUS_PROTO_ERR_CONTEXT:
		case OPUS_PROTO_ERR_CAPACITY:
		case OPUS_PG_ERR_RESULT_TOO_LARGE:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case OPUS_PROTO_ERR_NOMEM:
		case OPUS_PG_ERR_MODEL_MEMORY:
			return ERRCODE_OUT_OF_MEMORY;
		case OPUS_PG_ERR_MODEL_UNKNOWN:
			return ERRCODE_UNDEFINED_OBJECT;
		case OPUS_PROTO_ERR_UNSUPPORTED:
			return ERRCODE_FEATURE_NOT_SUPPORTED;
		case OPUS_PROTO_ERR_CANCELLED:
			return ERRCODE_QUERY_CANCELED;
		case OPUS_PROTO_ERR_IO:
		case OPUS_PROTO_ERR_FORMAT:
		case OPUS_PROTO_ERR_DEVICE:
		case OPUS_PG_ERR_ENGINE_DIED:
		case OPUS_PG_ERR_ENGINE_DOWN:
			return ERRCODE_SYSTEM_ERROR;
		case OPUS_PROTO_ERR_NOT_FOUND:
		case OPUS_PG_ERR_MODEL_MISSING:
		case OPUS_PG_ERR_ENGINE_MISSING:
			return ERRCODE_UNDEFINED_FILE;
		default:
			return ERRCODE_INTERNAL_ERROR;
	}
}

/*
 * Raise the error a slot or the engine status carries.  message is the
 * engine's or supervisor's text; detail may be empty.
 */
void
OpusRaiseError(int err_code, const char *message, const char *detail)
{
	int			sqlstate = OpusSqlstateFor(err_code);
	const char *hint = NULL;

	switch (err_code)
	{
		case OPUS_PROTO_ERR_CONTEXT:
		case OPUS_PROTO_ERR_CAPACITY:
			hint = "Shorten the prompt, lower max_tokens, or raise opus.kv_cache_size.";
			break;
		case OPUS_PG_ERR_RESULT_TOO_LARGE:
			hint = "Lower max_tokens or raise opus.request_buffer_size.";
			break;
		case OPUS_PG_ERR_MODEL_MISSING:
			hint = "Set opus.model to the path of a GGUF file, or to the name of a model installed in the extension's models directory.";
			break;
		case OPUS_PG_ERR_ENGINE_MISSING:
			hint = "Run \"make install\" for opus_pg, or set opus.engine_path.";
			break;
		case OPUS_PG_ERR_MODEL_MEMORY:
			hint = "Raise opus.memory_budget, or lower the model's kv_cache_size.";
			break;
		case OPUS_PG_ERR_ENGINE_DOWN:
			hint = "See the server log; the engine is restarted automatically with backoff.";
			break;
		default:
			break;
	}

	if (detail != NULL && detail[0] != '\0')
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("%s", message),
				 errdetail("%s", detail),
				 hint ? errhint("%s", hint) : 0));
	else
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("%s", message),
				 hint ? errhint("%s", hint) : 0));
	pg_unreachable();
}
