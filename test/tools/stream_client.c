/*
 * stream_client.c - read a streaming query the way an application would:
 * libpq single-row mode, recording when each row arrives.
 *
 *   stream_client CONNINFO SQL [MAX_ROWS]
 *
 * Sends SQL (one statement), switches to single-row mode and prints one
 * line per row as it arrives:
 *
 *   ROW <ms since the query was sent> <first column, escaped>
 *
 * (escaping: backslash, newline, tab and CR as \\ \n \t \r).  After the last
 * row it prints "OK <rows>" or "ERROR <sqlstate> <message>".  With MAX_ROWS,
 * it stops reading after that many rows and cancels the query (PQcancel),
 * the way a client that closes a stream early does, then prints
 * "CANCELLED <rows>".  Exit status: 0 OK or CANCELLED, 1 for a query error,
 * 2 for a usage or connection error.
 *
 * With STREAM_CLIENT_WARMUP set, that statement runs first on the same
 * connection (untimed), as an application with a pooled, warm connection
 * would have: a new backend's first call loads its catalog caches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libpq-fe.h"

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec * 1000.0 + (double) ts.tv_nsec / 1e6;
}

static void
print_escaped(const char *s)
{
	for (; *s; s++)
	{
		switch (*s)
		{
			case '\\':
				fputs("\\\\", stdout);
				break;
			case '\n':
				fputs("\\n", stdout);
				break;
			case '\t':
				fputs("\\t", stdout);
				break;
			case '\r':
				fputs("\\r", stdout);
				break;
			default:
				putchar(*s);
		}
	}
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	PGresult   *res;
	double		t0;
	long		rows = 0;
	long		max_rows = -1;
	int			rc = 0;
	int			done = 0;

	if (argc < 3 || argc > 4)
	{
		fprintf(stderr, "usage: %s CONNINFO SQL [MAX_ROWS]\n", argv[0]);
		return 2;
	}
	if (argc == 4)
	{
		char	   *end;

		max_rows = strtol(argv[3], &end, 10);
		if (*end != '\0' || max_rows < 1)
		{
			fprintf(stderr, "%s: MAX_ROWS must be a positive integer\n", argv[0]);
			return 2;
		}
	}
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "%s: %s", argv[0], PQerrorMessage(conn));
		PQfinish(conn);
		return 2;
	}
	if (getenv("STREAM_CLIENT_WARMUP") != NULL)
		PQclear(PQexec(conn, getenv("STREAM_CLIENT_WARMUP")));
	t0 = now_ms();
	if (!PQsendQuery(conn, argv[2]) || !PQsetSingleRowMode(conn))
	{
		fprintf(stderr, "%s: %s", argv[0], PQerrorMessage(conn));
		PQfinish(conn);
		return 2;
	}
	while ((res = PQgetResult(conn)) != NULL)
	{
		ExecStatusType st = PQresultStatus(res);

		if (st == PGRES_SINGLE_TUPLE)
		{
			double		t = now_ms() - t0;

			rows++;
			printf("ROW %.3f ", t);
			print_escaped(PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0));
			putchar('\n');
			fflush(stdout);
			if (max_rows > 0 && rows >= max_rows && !done)
			{
				PGcancel   *c = PQgetCancel(conn);
				char		err[256];

				if (c)
				{
					(void) PQcancel(c, err, sizeof(err));
					PQfreeCancel(c);
				}
				done = 1;
			}
		}
		else if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		{
			printf(done ? "CANCELLED %ld\n" : "OK %ld\n", rows);
		}
		else
		{
			const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

			if (done && state && strcmp(state, "57014") == 0)
				printf("CANCELLED %ld\n", rows);
			else
			{
				printf("ERROR %s %s\n", state ? state : "?????", msg ? msg : "");
				rc = 1;
			}
		}
		PQclear(res);
	}
	PQfinish(conn);
	return rc;
}
