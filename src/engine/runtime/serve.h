/*
 * serve.h - the engine side of the supervisor protocol (src/protocol.h;
 * serve.c describes the conversation).  Run by `opus_engine serve`
 * (cli/cmd_serve.c).
 */
#ifndef OPUS_SERVE_H
#define OPUS_SERVE_H

/*
 * Serve the supervisor on the connected socket fd (open), with the KV
 * cache in the shared-memory file kv_fd when it is >= 0 and open.  Returns
 * the process exit status: 0 (the supervisor closed the socket), 1 (an
 * error, sent as FATAL when possible), 3 (a protocol error).
 */
int			opus_serve(int fd, int kv_fd);

#endif							/* OPUS_SERVE_H */
