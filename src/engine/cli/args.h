/*
 * args.h - the one argument parser of the opus_engine subcommands: each
 * describes its options in a table and calls opus_cli_parse.
 *
 * Rules (the same for every subcommand): "--help" / "-h" prints the usage
 * and stops; a flag takes no value; every other option takes the next
 * argument as its value, and a missing or unparsable value, or an option
 * the table does not know, is a usage error ("opus_engine CMD: unknown
 * option" / "bad or missing value for"), printed with the usage.
 * Subcommands whose messages predate the parser (quantize, serve, embed,
 * genmodel) keep them through opus_cli_parse_spec; test/tools/
 * cli_args_compare.sh OLD NEW checks that a change keeps every message.
 */
#ifndef OPUS_CLI_ARGS_H
#define OPUS_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

enum opus_cli_kind
{
	OPUS_CLI_FLAG,				/* bool *: set to true */
	OPUS_CLI_STR,				/* const char **: the value */
	OPUS_CLI_INT,				/* int *: an integer in [lo, hi] */
	OPUS_CLI_FLOAT,				/* float *: a finite number */
	OPUS_CLI_U64,				/* uint64_t *: a non-negative integer */
	OPUS_CLI_I64,				/* int64_t *: an integer in [lo, hi] */
	OPUS_CLI_STOP,				/* bool *: set to true, parsing stops (an action) */
	OPUS_CLI_FN					/* parse(value): false when invalid */
};

struct opus_cli_opt
{
	const char *name;			/* "--model" */
	const char *alias;			/* "-m", or NULL */
	enum opus_cli_kind kind;
	void	   *out;
	long		lo,
				hi;				/* OPUS_CLI_INT, OPUS_CLI_I64 */
	bool		(*parse) (const char *value);	/* OPUS_CLI_FN */
};

#define OPUS_CLI_END {NULL, NULL, OPUS_CLI_FLAG, NULL, 0, 0, NULL}

/*
 * Parse argv[1 .. argc) against opts (ended by OPUS_CLI_END).  Returns -1
 * when all is well, else the exit code the subcommand returns: 0 after
 * --help, 2 after a usage error (usage printed either way).
 */
int			opus_cli_parse(const char *cmd, int argc, char **argv,
						   const struct opus_cli_opt *opts, void (*usage) (void));

/*
 * The same parser with a subcommand's own rules, for subcommands whose
 * messages predate it.  Every field past usage may be left zero:
 *   positional   takes an argument that is not in the table (false: a usage
 *                error, OPUS_CLI_ERR_UNKNOWN); without it such an argument is
 *                an unknown option, as in opus_cli_parse
 *   on_error     prints a usage error its own way and returns the exit code;
 *                without it the messages of opus_cli_parse
 *   no_short_help  "-h" is not --help (it goes to the table / positional)
 */
enum opus_cli_err
{
	OPUS_CLI_ERR_UNKNOWN,		/* not in the table (or positional said no) */
	OPUS_CLI_ERR_MISSING,		/* the option is the last argument */
	OPUS_CLI_ERR_BAD			/* its value does not parse */
};

struct opus_cli_spec
{
	const char *cmd;
	const struct opus_cli_opt *opts;
	void		(*usage) (void);
	bool		(*positional) (const char *arg, void *ctx);
	void	   *ctx;			/* passed to positional */
	int			(*on_error) (enum opus_cli_err e, const char *opt, const char *value);
	bool		no_short_help;
};

int			opus_cli_parse_spec(const struct opus_cli_spec *spec, int argc, char **argv);

/* Value parsers, also for the subcommands' own checks. */
bool		opus_cli_parse_int(const char *s, long lo, long hi, int *out);
bool		opus_cli_parse_float(const char *s, float *out);
bool		opus_cli_parse_i64(const char *s, long lo, long hi, int64_t *out);
bool		opus_cli_parse_u64(const char *s, uint64_t *out);

#endif							/* OPUS_CLI_ARGS_H */
