/* Raw libfabric baseline for benches/ofi.rs: the same protocol (8 B fi_writedata ping-pong, plain and injected;
 * the 8 B exchange a 2-rank allreduce needs at least; a one-way stream of 8 B writes; the floor of back-to-back
 * blocking 2-rank broadcasts of 8 B, 256 B, 1 KiB, 4 KiB and 16 KiB (bcast_<n>B_us: 64 slots and a credit every 32,
 * each write's completion awaited above the inject size; cqread_<n>B_us and cqfirst_<n>B_pct: that wait's time per
 * broadcast and the share of writes already complete at its first CQ read); 1 MiB / 16 MiB fi_writedata streams with window 8 and an
 * 8 B ack; 8 MiB streams in both directions at once; 512 KiB / 1 MiB exchanges in 512 KiB writes) straight on libfabric, one CQ, FI_CQ_FORMAT_DATA.
 * Usage: ofi_raw <provider>, with FABCOLL_BENCH_RANK (0|1) and FABCOLL_BENCH_DIR (address files) set, and
 * FABCOLL_BENCH_DC=1 for delivery-complete writes. Prints "name value" lines on rank 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHK(x)                                                                                              \
	do {                                                                                                \
		long _r = (long)(x);                                                                        \
		if (_r < 0) {                                                                               \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, fi_strerror((int)-_r));  \
			exit(1);                                                                            \
		}                                                                                           \
	} while (0)

#define LAT_WARM 1000
#define LAT_ITERS 10000
#define WINDOW 8
#define BW_TOTAL (512UL << 20)
#define MAXSZ (16UL << 20)

static struct fid_ep *ep;
static struct fid_cq *cq;
static fi_addr_t peer;
static uint64_t rkey, raddr;
static void *desc;
static long outstanding, arrived;
static struct fi_context2 ctx[WINDOW + 1];
static char *src_buf;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void poll_once(void)
{
	struct fi_cq_data_entry e[16];
	ssize_t n = fi_cq_read(cq, e, 16);
	if (n == -FI_EAGAIN)
		return;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(cq, &err, 0);
		fprintf(stderr, "cq error %s\n", fi_strerror(err.err));
		exit(1);
	}
	CHK(n);
	for (ssize_t i = 0; i < n; i++) {
		if (e[i].flags & FI_REMOTE_CQ_DATA)
			arrived++;
		else
			outstanding--;
	}
}

static void write_(char *buf, size_t len)
{
	ssize_t r;
	while ((r = fi_writedata(ep, buf, len, desc, len, peer, raddr, rkey, &ctx[outstanding % WINDOW])) ==
	       -FI_EAGAIN)
		poll_once();
	CHK(r);
	outstanding++;
}

static void wait_remote(void)
{
	while (arrived == 0)
		poll_once();
	arrived--;
}

static void inject_(char *buf, size_t len)
{
	ssize_t r;
	while ((r = fi_inject_writedata(ep, buf, len, len, peer, raddr, rkey)) == -FI_EAGAIN)
		poll_once();
	CHK(r);
}

/* What a 2-rank allreduce needs at least: both ranks write at once, each waits for the peer's write and for
 * its own write's completion (none with inject). Returns microseconds per exchange. */
static double exchange(int iters, int inject)
{
	double t0 = now();
	for (int i = 0; i < LAT_WARM + iters; i++) {
		if (i == LAT_WARM)
			t0 = now();
		if (inject)
			inject_(src_buf, 8);
		else
			write_(src_buf, 8);
		wait_remote();
		while (outstanding > 0)
			poll_once();
	}
	return (now() - t0) * 1e6 / iters;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	int rank = atoi(getenv("FABCOLL_BENCH_RANK"));
	const char *dir = getenv("FABCOLL_BENCH_DIR");
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_WRITE |
		      FI_REMOTE_READ;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	hints->fabric_attr->prov_name = strdup(prov);
	int shm = !strcmp(prov, "shm");
	CHK(fi_getinfo(FI_VERSION(1, 17), shm ? NULL : "127.0.0.1", NULL, shm ? 0 : FI_SOURCE, hints, &info));
	/* FABCOLL_BENCH_DC=1: delivery-complete writes (fabcoll's old ofi:tcp default; tcp refuses inject then). */
	int dc = getenv("FABCOLL_BENCH_DC") && atoi(getenv("FABCOLL_BENCH_DC"));
	if (dc)
		info->tx_attr->op_flags |= FI_DELIVERY_COMPLETE;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	CHK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, info, &dom, NULL));
	struct fi_cq_attr cqa = {.size = 1024, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
	CHK(fi_cq_open(dom, &cqa, &cq, NULL));
	struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 2};
	CHK(fi_av_open(dom, &ava, &av, NULL));
	CHK(fi_endpoint(dom, info, &ep, NULL));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_enable(ep));

	char *src = malloc(MAXSZ), *dst = malloc(MAXSZ);
	src_buf = src;
	/* Touch every page (as the Rust side does): untouched calloc pages would all read the shared zero page. */
	memset(src, 1, MAXSZ);
	memset(dst, 2, MAXSZ);
	struct fid_mr *smr, *dmr;
	int mr_mode = info->domain_attr->mr_mode;
	CHK(fi_mr_reg(dom, src, MAXSZ, FI_WRITE | FI_REMOTE_WRITE, 0, 100 + rank * 2, 0, &smr, NULL));
	CHK(fi_mr_reg(dom, dst, MAXSZ, FI_WRITE | FI_REMOTE_WRITE, 0, 101 + rank * 2, 0, &dmr, NULL));
	if (mr_mode & FI_MR_ENDPOINT) {
		CHK(fi_mr_bind(smr, &ep->fid, 0));
		CHK(fi_mr_enable(smr));
		CHK(fi_mr_bind(dmr, &ep->fid, 0));
		CHK(fi_mr_enable(dmr));
	}
	desc = fi_mr_desc(smr);

	/* Publish: addrlen, addr, key, base. */
	char name[256], path[4096], tmp[4096];
	size_t len = sizeof(name);
	CHK(fi_getname(&ep->fid, name, &len));
	uint64_t key = fi_mr_key(dmr), base = (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)dst : 0;
	snprintf(tmp, sizeof(tmp), "%s/raw.%d.tmp", dir, rank);
	snprintf(path, sizeof(path), "%s/raw.%d", dir, rank);
	FILE *f = fopen(tmp, "wb");
	fwrite(&len, sizeof(len), 1, f);
	fwrite(name, 1, len, f);
	fwrite(&key, 8, 1, f);
	fwrite(&base, 8, 1, f);
	fclose(f);
	rename(tmp, path);
	snprintf(path, sizeof(path), "%s/raw.%d", dir, 1 - rank);
	for (int i = 0; (f = fopen(path, "rb")) == NULL; i++) {
		if (i > 20000) {
			fprintf(stderr, "peer address missing\n");
			return 1;
		}
		usleep(1000);
	}
	char pname[256];
	size_t plen;
	if (fread(&plen, sizeof(plen), 1, f) != 1 || fread(pname, 1, plen, f) != plen || fread(&rkey, 8, 1, f) != 1 ||
	    fread(&raddr, 8, 1, f) != 1) {
		fprintf(stderr, "short address file\n");
		return 1;
	}
	fclose(f);
	if (fi_av_insert(av, pname, 1, &peer, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert failed\n");
		return 1;
	}

	double t0 = now();
	for (int i = 0; i < LAT_WARM + LAT_ITERS; i++) {
		if (i == LAT_WARM)
			t0 = now();
		if (rank == 0) {
			write_(src, 8);
			wait_remote();
		} else {
			wait_remote();
			write_(src, 8);
		}
	}
	if (rank == 0)
		printf("lat_8B_us %.3f\n", (now() - t0) * 1e6 / LAT_ITERS / 2);
	for (int i = 0; !dc && i < LAT_WARM + LAT_ITERS; i++) {
		if (i == LAT_WARM)
			t0 = now();
		if (rank == 0) {
			inject_(src, 8);
			wait_remote();
		} else {
			wait_remote();
			inject_(src, 8);
		}
	}
	if (rank == 0 && !dc)
		printf("lat_inject_8B_us %.3f\n", (now() - t0) * 1e6 / LAT_ITERS / 2);
	double x = exchange(LAT_ITERS, 0);
	if (rank == 0)
		printf("xchg_8B_us %.3f\n", x);
	if (!dc) {
		x = exchange(LAT_ITERS, 1);
		if (rank == 0)
			printf("xchg_inject_8B_us %.3f\n", x);
	}
	/* A one-way stream of 8 B writes (window WINDOW, an 8 B ack at the end): what back-to-back 2-rank
	 * broadcasts of 8 B need at least, with the root never waiting for the receiver. */
	for (int inject = 0; inject < 2 - dc; inject++) {
		long n = 20 * LAT_ITERS;
		double t = now();
		if (rank == 0) {
			for (long i = 0; i < n; i++) {
				while (outstanding >= WINDOW)
					poll_once();
				if (inject)
					inject_(src, 8);
				else
					write_(src, 8);
			}
			wait_remote();
			printf("%s_8B_us %.3f\n", inject ? "stream_inject" : "stream", (now() - t) * 1e6 / n);
		} else {
			while (arrived < n)
				poll_once();
			arrived -= n;
			write_(src, 8);
		}
		while (outstanding > 0)
			poll_once();
	}
	/* What back-to-back blocking 2-rank broadcasts need at least, with the guarantees fabcoll's give and nothing
	 * else: the root writes each message into one of 64 slots at the receiver (injected when it fits the
	 * provider's inject size, else written and its completion read before the next, as a blocking call must
	 * before it returns the buffer), and the receiver copies each message out and returns an 8 B credit every
	 * 32. No headers, no plan, no MR lookup: the floor under fabcoll's p = 2 bcast of that size (on net, above
	 * 128 B every write costs a CQ read, whose progress is an epoll_wait). */
	static const size_t bcast_sizes[] = {8, 256, 1024, 4096, 16384};
	for (size_t b = 0; !dc && b < sizeof(bcast_sizes) / sizeof(bcast_sizes[0]); b++) {
		const size_t sz = bcast_sizes[b];
		const long n = 20 * LAT_ITERS, slots = 64, credit = 32;
		int inj = sz <= info->tx_attr->inject_size;
		long done_first = 0;
		double read_time = 0, t = now();
		if (rank == 0) {
			long credits = slots;
			for (long i = 0; i < n; i++) {
				while (credits == 0 || arrived) {
					if (!arrived)
						poll_once();
					credits += credit * arrived;
					arrived = 0;
				}
				if (inj) {
					inject_(src, sz);
				} else {
					write_(src, sz);
					double t_read = now();
					/* The write is usually complete when fi_writedata returns (the provider sent it
					 * in the call); learning so still costs a read. */
					poll_once();
					done_first += outstanding == 0;
					while (outstanding > 0)
						poll_once();
					read_time += now() - t_read;
				}
				credits--;
			}
			while (credits < slots) {
				poll_once();
				credits += credit * arrived;
				arrived = 0;
			}
			printf("bcast_%zuB_us %.3f\n", sz, (now() - t) * 1e6 / n);
			if (!inj) {
				/* cqread: the completion wait per broadcast (its share of bcast_); cqfirst: the share
				 * of writes whose completion the first read already returned. */
				printf("cqread_%zuB_us %.3f\n", sz, read_time * 1e6 / n);
				printf("cqfirst_%zuB_pct %.1f\n", sz, 100.0 * done_first / n);
			}
		} else {
			for (long got = 0; got < n;) {
				poll_once();
				for (; arrived > 0; arrived--) {
					memcpy(dst + MAXSZ / 2, dst, sz);
					if (++got % credit == 0)
						inject_(src, 8);
				}
			}
		}
	}
	size_t sizes[2] = {1UL << 20, 16UL << 20};
	for (int s = 0; s < 2; s++) {
		size_t size = sizes[s], n = BW_TOTAL / size < 8 ? 8 : BW_TOTAL / size;
		if (rank == 0) {
			double t = now();
			size_t posted = 0;
			while (arrived == 0) {
				while (posted < n && outstanding < WINDOW) {
					write_(src, size);
					posted++;
				}
				poll_once();
			}
			arrived--;
			printf("bw_%zuMiB_MBps %.1f\n", size >> 20, (double)(n * size) / (now() - t) / 1e6);
		} else {
			while ((size_t)arrived < n)
				poll_once();
			arrived -= n;
			write_(src, 8);
		}
		while (outstanding > 0)
			poll_once();
	}
	/* Both directions at once (what the phases of a 2-rank allreduce of large messages do): each rank writes
	 * n messages of 8 MiB with window 8 and waits for the peer's n. */
	{
		size_t size = 8UL << 20, n = 32, posted = 0;
		double t = now();
		while ((size_t)arrived < n || outstanding > 0 || posted < n) {
			while (posted < n && outstanding < WINDOW) {
				write_(src, size);
				posted++;
			}
			poll_once();
		}
		arrived -= n;
		if (rank == 0)
			printf("bibw_8MiB_MBps %.1f\n", (double)(n * size) / (now() - t) / 1e6);
	}
	/* The floor of a 2-rank allgather or alltoall of 2*size bytes (its one exchange, without the grant round trip
	 * and the local copy): both ranks write size bytes to each other in 512 KiB writes (fabcoll's segment on
	 * socket providers) and wait for the peer's and their own, 200 times. */
	for (size_t size = 512UL << 10; size <= (1UL << 20); size *= 2) {
		const size_t seg = 512UL << 10, iters = 200, warm = 20;
		double t = now();
		for (size_t i = 0; i < warm + iters; i++) {
			if (i == warm)
				t = now();
			for (size_t off = 0; off < size; off += seg)
				write_(src + off, seg);
			for (size_t k = 0; k < size / seg; k++)
				wait_remote();
			while (outstanding > 0)
				poll_once();
		}
		if (rank == 0)
			printf("xchg_%zuKiB_us %.1f\n", size >> 10, (now() - t) * 1e6 / iters);
	}
	fflush(stdout);
	t0 = now();
	while (now() - t0 < 0.1)
		poll_once();
	fi_close(&smr->fid);
	fi_close(&dmr->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
