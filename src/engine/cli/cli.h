/*
 * cli.h - the subcommands of the opus_engine binary.  Each takes the
 * arguments after the subcommand name (argv[0] is the subcommand), returns a
 * process exit code (0 ok, 1 runtime error, 2 usage error), and prints usage
 * to stderr on wrong arguments.  main() in src/engine/cli/opus_engine.c dispatches.
 *
 *   run       cli_run.c      generate a completion for a prompt
 *   bench     cli_run.c      prefill / decode tokens per second
 *   embed     cmd_embed.c    sentence embeddings from an encoder model
 *   quantize  cmd_quantize.c write a GGUF in another tensor type
 *   serve     cmd_serve.c    the supervisor's engine (protocol on a socket fd)
 *   logits    cli_run.c      dump top logits for goldens / tests
 *   genmodel  cli_genmodel.c write a random-weight GGUF with real model shapes
 *
 * run, bench and logits parse their options with args.h's table parser.
 */
#ifndef OPUS_CLI_H
#define OPUS_CLI_H

int			opus_cli_run(int argc, char **argv);
int			opus_cli_bench(int argc, char **argv);
int			opus_cli_logits(int argc, char **argv);
int			opus_cli_quantize(int argc, char **argv);
int			opus_cli_embed(int argc, char **argv);
int			opus_cli_serve(int argc, char **argv);
int			opus_cli_genmodel(int argc, char **argv);

#endif							/* OPUS_CLI_H */
