/* The kernel's floor for small messages over loopback TCP, below any library: one TCP connection between two
 * processes (TCP_NODELAY), 8 B messages, receivers spinning on non-blocking recv. Three patterns, the ones a
 * 2-rank collective needs at least: ping-pong (half a round trip: lat_8B_us), exchange (both send, then both
 * receive: an allreduce, xchg_8B_us) and a one-way stream (back-to-back broadcasts, stream_8B_us).
 * Used by scripts/tcp-floor.sh beside benches/ofi_raw.c and Open MPI's tcp BTL.
 * Usage: sock_raw, with FABCOLL_BENCH_RANK (0|1) and FABCOLL_BENCH_DIR (rank 1 publishes its port there) set.
 * Prints "name value" lines on rank 0. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARM 1000
#define ITERS 20000
#define SIZE 8

static int fd;
static char buf[4096];

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void send_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0)
			die("send");
		p += r;
		n -= (size_t)r;
	}
}

/* Spins until n bytes arrived. */
static void recv_all(size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, buf, n - got < sizeof(buf) ? n - got : sizeof(buf), MSG_DONTWAIT);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0) {
			fprintf(stderr, "peer closed\n");
			exit(1);
		}
	}
}

int main(void)
{
	const char *r = getenv("FABCOLL_BENCH_RANK"), *dir = getenv("FABCOLL_BENCH_DIR");
	if (!r || !dir) {
		fprintf(stderr, "set FABCOLL_BENCH_RANK and FABCOLL_BENCH_DIR\n");
		return 2;
	}
	int rank = atoi(r), one = 1;
	char path[4096], tmp[4096];
	snprintf(path, sizeof(path), "%s/sock.port", dir);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (rank == 1) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		socklen_t len = sizeof(a);
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
		    getsockname(l, (struct sockaddr *)&a, &len))
			die("listen");
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		FILE *f = fopen(tmp, "w");
		if (!f)
			die("port file");
		fprintf(f, "%d\n", ntohs(a.sin_port));
		fclose(f);
		rename(tmp, path);
		fd = accept(l, NULL, NULL);
		if (fd < 0)
			die("accept");
		close(l);
	} else {
		FILE *f = NULL;
		for (int i = 0; (f = fopen(path, "r")) == NULL; i++) {
			if (i > 20000) {
				fprintf(stderr, "peer port missing\n");
				return 1;
			}
			usleep(1000);
		}
		int port = 0;
		if (fscanf(f, "%d", &port) != 1)
			die("port file");
		fclose(f);
		a.sin_port = htons((unsigned short)port);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
			die("connect");
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	char msg[SIZE] = {1};

	double t0 = now();
	for (int i = 0; i < WARM + ITERS; i++) {
		if (i == WARM)
			t0 = now();
		if (rank == 0) {
			send_all(msg, SIZE);
			recv_all(SIZE);
		} else {
			recv_all(SIZE);
			send_all(msg, SIZE);
		}
	}
	if (rank == 0)
		printf("lat_8B_us %.3f\n", (now() - t0) * 1e6 / ITERS / 2);

	for (int i = 0; i < WARM + ITERS; i++) {
		if (i == WARM)
			t0 = now();
		send_all(msg, SIZE);
		recv_all(SIZE);
	}
	if (rank == 0)
		printf("xchg_8B_us %.3f\n", (now() - t0) * 1e6 / ITERS);

	/* Stream: rank 0 sends, rank 1 receives everything and acks with one message. */
	t0 = now();
	if (rank == 0) {
		for (int i = 0; i < ITERS; i++)
			send_all(msg, SIZE);
		recv_all(SIZE);
		printf("stream_8B_us %.3f\n", (now() - t0) * 1e6 / ITERS);
	} else {
		recv_all((size_t)ITERS * SIZE);
		send_all(msg, SIZE);
	}
	close(fd);
	return 0;
}
