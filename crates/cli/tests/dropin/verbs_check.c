/*
 * The verbs the Debian tools leave untested, against the drop-in libibverbs.so.1, compiled
 * with Debian's <infiniband/verbs.h> (rdma-core 44) by tests/dropin_verbs.rs.
 *
 * One process, one device: each QP pair is connected to itself through the device's own
 * address (GID index argv[2] on RoCE, the port's LID on InfiniBand). Covered: the extended
 * device and port queries (the inline functions through verbs_context), ibv_create_cq_ex and
 * extended polling (ibv_start_poll / ibv_next_poll / ibv_end_poll / ibv_wc_read_*),
 * ibv_create_qp_ex with send_ops_flags and the whole ibv_wr_* table, atomics through both
 * APIs, SRQ with its limit event, asynchronous events on async_fd (SRQ limit, last WQE
 * reached, CQ error and QP fatal of an overflowing CQ), completion channels (poll(2) on the
 * fd), threads sharing a context, and bad input.
 *
 * Prints "ok NAME" per check, "status NAME N" for the completion status of a bad work request
 * (the test compares them with what the Rust API gives), and "FAIL NAME: ..." then exits 1.
 *
 * usage: verbs_check DEVICE GID_INDEX
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define BUF 4096
#define TIMEOUT_MS 5000

static const char *check = "start";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#include <stdarg.h>
static void fail(const char *fmt, ...)
{
	va_list ap;
	printf("FAIL %s: ", check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (errno %d %s)\n", errno, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void ok(void)
{
	printf("ok %s\n", check);
	fflush(stdout);
}

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;
	int gid_index;
	int roce;
	union ibv_gid gid;
	uint16_t lid;
	enum ibv_mtu mtu;
	char *a, *b;
	struct ibv_mr *mra, *mrb;
};

/* Moves qp to RTS, connected to remote_qpn at this device's own address. */
static void connect_qp(struct env *e, struct ibv_qp *qp, uint32_t remote_qpn, int type)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = e->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		.qkey = 0x11111111,
	};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	if (ibv_modify_qp(qp, &a, mask))
		fail("modify to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		a.path_mtu = e->mtu;
		a.dest_qp_num = remote_qpn;
		a.rq_psn = 7;
		a.ah_attr.port_num = e->port;
		if (e->roce) {
			a.ah_attr.is_global = 1;
			a.ah_attr.grh.dgid = e->gid;
			a.ah_attr.grh.sgid_index = e->gid_index;
			a.ah_attr.grh.hop_limit = 64;
		} else {
			a.ah_attr.dlid = e->lid;
		}
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 4;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (ibv_modify_qp(qp, &a, mask))
		fail("modify to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		fail("modify to RTS");
	if (qp->state != IBV_QPS_RTS)
		fail("qp->state is %d after the move to RTS", qp->state);
}

/* One completion from an extended CQ: start/next/end with a bound. */
struct ex_wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, imm, qp_num, src_qp, flags;
};

static int poll_ex(struct ibv_cq_ex *cq, struct ex_wc *out, int n)
{
	long t0 = now_ms();
	int got = 0;
	while (got < n) {
		struct ibv_poll_cq_attr attr = {};
		int r = ibv_start_poll(cq, &attr);
		if (r == ENOENT) {
			if (now_ms() - t0 > TIMEOUT_MS)
				fail("%d of %d completions after %d ms", got, n, TIMEOUT_MS);
			continue;
		}
		if (r)
			fail("ibv_start_poll returned %d", r);
		do {
			struct ex_wc *w = &out[got++];
			w->wr_id = cq->wr_id;
			w->status = cq->status;
			w->opcode = ibv_wc_read_opcode(cq);
			w->byte_len = ibv_wc_read_byte_len(cq);
			w->imm = ntohl(ibv_wc_read_imm_data(cq));
			w->qp_num = ibv_wc_read_qp_num(cq);
			w->src_qp = ibv_wc_read_src_qp(cq);
			w->flags = ibv_wc_read_wc_flags(cq);
		} while (got < n && (r = ibv_next_poll(cq)) == 0);
		ibv_end_poll(cq);
		if (r && r != ENOENT)
			fail("ibv_next_poll returned %d", r);
	}
	return got;
}

static void poll_legacy(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	long t0 = now_ms();
	int got = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			fail("ibv_poll_cq returned %d", r);
		got += r;
		if (!r && now_ms() - t0 > TIMEOUT_MS)
			fail("%d of %d completions after %d ms", got, n, TIMEOUT_MS);
	}
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t wr_id)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = BUF, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		fail("ibv_post_recv");
}

static void expect(struct ex_wc *w, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
	if (w->status != IBV_WC_SUCCESS)
		fail("wr %llu: %s", (unsigned long long)w->wr_id, ibv_wc_status_str(w->status));
	if (w->wr_id != wr_id || w->opcode != op || (len != ~0u && w->byte_len != len))
		fail("got wr_id %llu opcode %d len %u, want %llu %d %u",
		     (unsigned long long)w->wr_id, w->opcode, w->byte_len,
		     (unsigned long long)wr_id, op, len);
}

static struct ibv_cq_ex *cq_ex(struct env *e, struct ibv_comp_channel *ch)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64,
		.channel = ch,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(e->ctx, &a);
	if (!cq)
		fail("ibv_create_cq_ex");
	return cq;
}

static struct ibv_qp *qp_ex(struct env *e, struct ibv_cq_ex *cq, struct ibv_srq *srq, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(cq),
		.recv_cq = ibv_cq_ex_to_cq(cq),
		.srq = srq,
		.cap = { .max_send_wr = 32, .max_recv_wr = srq ? 0 : 32, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(e->ctx, &a);
	if (!qp)
		fail("ibv_create_qp_ex");
	return qp;
}

#define ALL_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
		 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | \
		 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static void device(struct env *e, const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	check = "device list";
	if (!list)
		fail("ibv_get_device_list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			e->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!e->ctx)
		fail("no device %s among %d, or it did not open", name, n);
	ok();

	check = "query device ex";
	struct ibv_device_attr_ex dx;
	if (ibv_query_device_ex(e->ctx, NULL, &dx))
		fail("ibv_query_device_ex");
	if (dx.orig_attr.phys_port_cnt < 1 || dx.orig_attr.max_qp_wr < 32 ||
	    dx.orig_attr.atomic_cap == IBV_ATOMIC_NONE)
		fail("ports %d max_qp_wr %d atomic_cap %d", dx.orig_attr.phys_port_cnt,
		     dx.orig_attr.max_qp_wr, dx.orig_attr.atomic_cap);
	struct ibv_device_attr d;
	if (ibv_query_device(e->ctx, &d) || d.vendor_part_id != dx.orig_attr.vendor_part_id)
		fail("ibv_query_device disagrees with ibv_query_device_ex");
	ok();

	check = "query port";
	struct ibv_port_attr pa;
	e->port = 1;
	if (ibv_query_port(e->ctx, e->port, &pa))
		fail("ibv_query_port");
	if (pa.state != IBV_PORT_ACTIVE)
		fail("port 1 is %s", ibv_port_state_str(pa.state));
	e->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	e->lid = pa.lid;
	e->mtu = pa.active_mtu < IBV_MTU_1024 ? pa.active_mtu : IBV_MTU_1024;
	errno = 0;
	if (ibv_query_port(e->ctx, 9, &pa) == 0)
		fail("port 9 exists");
	ok();

	check = "query gid ex";
	struct ibv_gid_entry ge;
	if (ibv_query_gid(e->ctx, e->port, e->gid_index, &e->gid))
		fail("ibv_query_gid");
	if (ibv_query_gid_ex(e->ctx, e->port, e->gid_index, &ge, 0))
		fail("ibv_query_gid_ex");
	if (memcmp(&ge.gid, &e->gid, sizeof e->gid) ||
	    ge.gid_type != (e->roce ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB))
		fail("the two GID queries disagree (type %u)", ge.gid_type);
	struct ibv_gid_entry table[256];
	ssize_t nt = ibv_query_gid_table(e->ctx, table, 256, 0);
	if (nt < 1)
		fail("ibv_query_gid_table gave %zd", nt);
	__be16 pkey;
	if (ibv_query_pkey(e->ctx, e->port, 0, &pkey) || ntohs(pkey) != 0xffff ||
	    ibv_get_pkey_index(e->ctx, e->port, htons(0xffff)) != 0)
		fail("the default P_Key is not at index 0");
	ok();

	check = "pd mr";
	e->pd = ibv_alloc_pd(e->ctx);
	e->a = calloc(1, BUF);
	e->b = calloc(1, BUF);
	if (!e->pd || !e->a || !e->b)
		fail("alloc");
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
	e->mra = ibv_reg_mr(e->pd, e->a, BUF, acc);
	e->mrb = ibv_reg_mr_iova2(e->pd, e->b, BUF, (uintptr_t)e->b, acc);
	if (!e->mra || !e->mrb)
		fail("ibv_reg_mr");
	if (e->mra->addr != e->a || e->mra->length != BUF || e->mra->pd != e->pd)
		fail("the MR's fields");
	ok();
}

/* Whether some of this process's memory is a softib-shared segment (/proc/self/maps). */
static int shared_segments(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof line, f))
		n += strstr(line, "softib-mr") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* Registration keeps the memory's contents, and a child of fork gets its own copy. */
#include <sys/wait.h>
#include <unistd.h>
static void memory(struct env *e)
{
	check = "registration keeps the contents; fork gives the child its own copy";
	size_t len = 256 * 1024;
	unsigned char *m = malloc(len);
	if (!m)
		fail("malloc");
	for (size_t i = 0; i < len; i++)
		m[i] = (unsigned char)(i * 7 + 1);
	struct ibv_mr *mr = ibv_reg_mr(e->pd, m, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fail("ibv_reg_mr");
	for (size_t i = 0; i < len; i++)
		if (m[i] != (unsigned char)(i * 7 + 1))
			fail("byte %zu changed by the registration", i);
	pid_t child = fork();
	if (child == 0) {
		/* The parent's bytes are here, and writing them is the child's business. */
		int bad = m[1000] != (unsigned char)(1000 * 7 + 1);
		memset(m, 0xee, len);
		_exit(bad ? 2 : 0);
	}
	int st = 0;
	if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("the child did not see the parent's memory (status %d)", st);
	for (size_t i = 0; i < len; i++)
		if (m[i] != (unsigned char)(i * 7 + 1))
			fail("byte %zu changed by the child's write", i);
	if (ibv_dereg_mr(mr))
		fail("ibv_dereg_mr");
	printf("shared %d\n", shared_segments() > 0);
	ok();
	free(m);
}

static void wr_api(struct env *e)
{
	check = "wr api setup";
	struct ibv_cq_ex *cq = cq_ex(e, NULL);
	struct ibv_qp *qa = qp_ex(e, cq, NULL, ALL_OPS), *qb = qp_ex(e, cq, NULL, ALL_OPS);
	connect_qp(e, qa, qb->qp_num, IBV_QPT_RC);
	connect_qp(e, qb, qa->qp_num, IBV_QPT_RC);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	if (!x)
		fail("ibv_qp_to_qp_ex");
	ok();
	struct ex_wc w[8];

	check = "wr_send + wr_set_sge, two in one batch";
	strcpy(e->a, "hello");
	strcpy(e->a + 100, "world");
	post_recv(qb, e->mrb, e->b, 11);
	post_recv(qb, e->mrb, e->b + 2048, 12);
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 6);
	x->wr_id = 2;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a + 100, 6);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 4);
	int seen = 0;
	for (int i = 0; i < 4; i++) {
		if (w[i].status)
			fail("wr %llu %s", (unsigned long long)w[i].wr_id, ibv_wc_status_str(w[i].status));
		seen |= 1 << w[i].wr_id;
		if (w[i].opcode == IBV_WC_RECV && (w[i].byte_len != 6 || w[i].qp_num != qb->qp_num))
			fail("recv of %u bytes on QP %u", w[i].byte_len, w[i].qp_num);
	}
	if (seen != ((1 << 1) | (1 << 2) | (1 << 11) | (1 << 12)) || strcmp(e->b, "hello") ||
	    strcmp(e->b + 2048, "world"))
		fail("data or completions wrong (mask %x)", seen);
	ok();

	check = "wr_send_imm + wr_set_inline_data";
	post_recv(qb, e->mrb, e->b, 13);
	ibv_wr_start(x);
	x->wr_id = 3;
	ibv_wr_send_imm(x, htonl(0x1234abcd));
	ibv_wr_set_inline_data(x, "inline!", 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 2);
	struct ex_wc *r = w[0].opcode == IBV_WC_RECV ? &w[0] : &w[1];
	expect(r, 13, IBV_WC_RECV, 8);
	if (!(r->flags & IBV_WC_WITH_IMM) || r->imm != 0x1234abcd || strcmp(e->b, "inline!"))
		fail("imm %x flags %x data %s", r->imm, r->flags, e->b);
	ok();

	check = "wr_set_inline_data_list + wr_set_sge_list";
	post_recv(qb, e->mrb, e->b, 14);
	struct ibv_data_buf parts[2] = { { "ab", 2 }, { "cd", 3 } };
	ibv_wr_start(x);
	x->wr_id = 4;
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 2, parts);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 2);
	if (strcmp(e->b, "abcd"))
		fail("got %s", e->b);
	post_recv(qb, e->mrb, e->b, 15);
	struct ibv_sge sl[2] = { { (uintptr_t)e->a, 3, e->mra->lkey },
				 { (uintptr_t)e->a + 100, 6, e->mra->lkey } };
	ibv_wr_start(x);
	x->wr_id = 5;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, sl);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 2);
	if (memcmp(e->b, "helworld", 9))
		fail("got %s", e->b);
	ok();

	check = "wr_rdma_write, wr_rdma_write_imm, wr_rdma_read";
	memset(e->b, 0, BUF);
	strcpy(e->a, "written");
	ibv_wr_start(x);
	x->wr_id = 6;
	ibv_wr_rdma_write(x, e->mrb->rkey, (uintptr_t)e->b + 8);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 1);
	expect(&w[0], 6, IBV_WC_RDMA_WRITE, ~0u);
	if (strcmp(e->b + 8, "written"))
		fail("remote memory holds %s", e->b + 8);
	post_recv(qb, e->mrb, e->b + 1024, 16);
	ibv_wr_start(x);
	x->wr_id = 7;
	ibv_wr_rdma_write_imm(x, e->mrb->rkey, (uintptr_t)e->b + 16, htonl(77));
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 2);
	r = w[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM ? &w[0] : &w[1];
	expect(r, 16, IBV_WC_RECV_RDMA_WITH_IMM, ~0u);
	if (r->imm != 77 || strcmp(e->b + 16, "written"))
		fail("imm %u", r->imm);
	strcpy(e->b + 200, "read me");
	memset(e->a, 0, 64);
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_rdma_read(x, e->mrb->rkey, (uintptr_t)e->b + 200);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 1);
	expect(&w[0], 8, IBV_WC_RDMA_READ, 8);
	if (strcmp(e->a, "read me"))
		fail("read %s", e->a);
	ok();

	check = "wr_atomic_fetch_add + wr_atomic_cmp_swp";
	uint64_t *remote = (uint64_t *)(e->b + 512), *local = (uint64_t *)(e->a + 512);
	*remote = 40;
	ibv_wr_start(x);
	x->wr_id = 9;
	ibv_wr_atomic_fetch_add(x, e->mrb->rkey, (uintptr_t)remote, 2);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)local, 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 1);
	expect(&w[0], 9, IBV_WC_FETCH_ADD, 8);
	if (*local != 40 || *remote != 42)
		fail("fetch_add: old %llu new %llu", (unsigned long long)*local,
		     (unsigned long long)*remote);
	ibv_wr_start(x);
	x->wr_id = 10;
	ibv_wr_atomic_cmp_swp(x, e->mrb->rkey, (uintptr_t)remote, 42, 7);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)local, 8);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	poll_ex(cq, w, 1);
	expect(&w[0], 10, IBV_WC_COMP_SWAP, 8);
	if (*local != 42 || *remote != 7)
		fail("cmp_swp: old %llu new %llu", (unsigned long long)*local,
		     (unsigned long long)*remote);
	ok();

	check = "wr_abort, and an operation softib lacks fails the batch";
	ibv_wr_start(x);
	x->wr_id = 99;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 1);
	ibv_wr_abort(x);
	ibv_wr_start(x);
	ibv_wr_local_inv(x, 5);
	int rc = ibv_wr_complete(x);
	if (rc != EOPNOTSUPP)
		fail("ibv_wr_local_inv's batch completed with %d", rc);
	struct ibv_poll_cq_attr pa = {};
	if (ibv_start_poll(cq, &pa) != ENOENT)
		fail("a completion after an aborted batch");
	ok();

	check = "create_qp_ex refuses what softib lacks; legacy QPs have no qp_ex";
	struct ibv_qp_init_attr_ex bad = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd, .send_ops_flags = IBV_QP_EX_WITH_BIND_MW,
	};
	errno = 0;
	if (ibv_create_qp_ex(e->ctx, &bad) || errno != EOPNOTSUPP)
		fail("a QP with IBV_QP_EX_WITH_BIND_MW");
	bad.comp_mask = IBV_QP_INIT_ATTR_PD;
	struct ibv_qp *legacy = ibv_create_qp_ex(e->ctx, &bad);
	if (!legacy || ibv_qp_to_qp_ex(legacy))
		fail("a QP made with only a PD");
	struct ibv_xrcd_init_attr xa = { .comp_mask = 0 };
	errno = 0;
	if (ibv_open_xrcd(e->ctx, &xa) || errno != EOPNOTSUPP)
		fail("ibv_open_xrcd");
	ibv_destroy_qp(legacy);
	ok();

	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

static void legacy(struct env *e)
{
	check = "ibv_post_send atomics, completion channel";
	struct ibv_comp_channel *ch = ibv_create_comp_channel(e->ctx);
	if (!ch)
		fail("ibv_create_comp_channel");
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 16, (void *)0x5eed, ch, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	struct ibv_qp *q = ibv_create_qp(e->pd, &ia);
	if (!cq || !q)
		fail("create");
	if (ibv_destroy_comp_channel(ch) != EBUSY)
		fail("a channel in use was destroyed");
	connect_qp(e, q, q->qp_num, IBV_QPT_RC);
	if (ibv_req_notify_cq(cq, 0))
		fail("ibv_req_notify_cq");
	uint64_t *remote = (uint64_t *)(e->b + 768), *local = (uint64_t *)(e->a + 768);
	*remote = 5;
	struct ibv_sge s = { (uintptr_t)local, 8, e->mra->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 21, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.wr.atomic = { .remote_addr = (uintptr_t)remote, .compare_add = 10,
			       .rkey = e->mrb->rkey },
	}, *bad;
	if (ibv_post_send(q, &wr, &bad))
		fail("ibv_post_send");
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	if (poll(&pfd, 1, TIMEOUT_MS) != 1)
		fail("the channel's fd did not become readable in %d ms", TIMEOUT_MS);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) || ev_cq != cq || ev_ctx != (void *)0x5eed)
		fail("ibv_get_cq_event");
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc;
	poll_legacy(cq, &wc, 1);
	if (wc.status || wc.opcode != IBV_WC_FETCH_ADD || *local != 5 || *remote != 15)
		fail("fetch_add: %s old %llu", ibv_wc_status_str(wc.status),
		     (unsigned long long)*local);
	wr.wr_id = 22;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 15;
	wr.wr.atomic.swap = 1;
	if (ibv_post_send(q, &wr, &bad))
		fail("ibv_post_send");
	poll_legacy(cq, &wc, 1);
	if (wc.status || wc.opcode != IBV_WC_COMP_SWAP || *local != 15 || *remote != 1)
		fail("cmp_swp");
	/* A non-blocking channel with nothing pending answers EAGAIN. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != -1 || errno != EAGAIN)
		fail("a non-blocking channel with no event");
	ok();

	check = "bad input";
	errno = 0;
	if (ibv_alloc_pd(NULL) || errno != EINVAL)
		fail("ibv_alloc_pd(NULL)");
	errno = 0;
	if (ibv_create_cq(e->ctx, 0, NULL, NULL, 0) || errno != EINVAL)
		fail("a CQ of 0 entries");
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(q, &qa, IBV_QP_STATE) == 0)
		fail("RTS -> RTR");
	struct ibv_qp *fresh = ibv_create_qp(e->pd, &ia);
	bad = NULL;
	wr.wr_id = 23;
	if (!fresh || ibv_post_send(fresh, &wr, &bad) == 0 || bad != &wr)
		fail("a post on a QP in RESET");
	struct ibv_sge big = { (uintptr_t)e->a, BUF + 1, e->mra->lkey };
	struct ibv_sge huge[64];
	struct ibv_send_wr many = { .wr_id = 24, .sg_list = huge, .num_sge = 64,
				    .opcode = IBV_WR_SEND };
	bad = NULL;
	if (ibv_post_send(q, &many, &bad) == 0 || bad != &many)
		fail("64 SGEs on a QP of max_send_sge 1");
	ok();

	/* A WR past its MR's end, and a write past the remote MR's end: the statuses. */
	check = "wr past the MR";
	struct ibv_send_wr past = { .wr_id = 25, .sg_list = &big, .num_sge = 1,
				    .opcode = IBV_WR_RDMA_WRITE,
				    .wr.rdma = { (uintptr_t)e->b, e->mrb->rkey } };
	if (ibv_post_send(q, &past, &bad))
		fail("ibv_post_send");
	poll_legacy(cq, &wc, 1);
	printf("status local_sge_past_mr %d\n", wc.status);
	ibv_destroy_qp(q);
	/* The responder is another QP: a QP that is its own peer would flush the WR when the
	 * NAK moves it to the error state. */
	q = ibv_create_qp(e->pd, &ia);
	struct ibv_qp *peer = ibv_create_qp(e->pd, &ia);
	if (!q || !peer)
		fail("create");
	connect_qp(e, q, peer->qp_num, IBV_QPT_RC);
	connect_qp(e, peer, q->qp_num, IBV_QPT_RC);
	struct ibv_sge small = { (uintptr_t)e->a, 64, e->mra->lkey };
	struct ibv_send_wr rpast = { .wr_id = 26, .sg_list = &small, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE,
				     .wr.rdma = { (uintptr_t)e->b + BUF - 32, e->mrb->rkey } };
	if (ibv_post_send(q, &rpast, &bad))
		fail("ibv_post_send");
	poll_legacy(cq, &wc, 1);
	printf("status remote_write_past_mr %d\n", wc.status);
	ok();
	ibv_destroy_qp(q);
	ibv_destroy_qp(peer);
	ibv_destroy_qp(fresh);
	ibv_destroy_cq(cq);
	if (ibv_destroy_comp_channel(ch))
		fail("ibv_destroy_comp_channel");
}

/* Waits (bounded) for an asynchronous event of `type`, acknowledging the others. */
static struct ibv_async_event wait_event(struct env *e, enum ibv_event_type type)
{
	int fl = fcntl(e->ctx->async_fd, F_GETFL);
	fcntl(e->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct pollfd pfd = { .fd = e->ctx->async_fd, .events = POLLIN };
	long t0 = now_ms();
	struct ibv_async_event ev;
	for (;;) {
		if (poll(&pfd, 1, TIMEOUT_MS) != 1)
			fail("async_fd not readable in %d ms (waiting for %s)", TIMEOUT_MS,
			     ibv_event_type_str(type));
		if (ibv_get_async_event(e->ctx, &ev) == 0) {
			if (ev.event_type == type)
				return ev;
			ibv_ack_async_event(&ev);
		} else if (errno != EAGAIN) {
			fail("ibv_get_async_event");
		}
		if (now_ms() - t0 > TIMEOUT_MS)
			fail("no %s event in %d ms", ibv_event_type_str(type), TIMEOUT_MS);
	}
}

static void srq(struct env *e)
{
	check = "srq with its limit event";
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *s = ibv_create_srq(e->pd, &sa);
	if (!s)
		fail("ibv_create_srq");
	struct ibv_cq_ex *cq = cq_ex(e, NULL);
	struct ibv_qp *qa = qp_ex(e, cq, NULL, IBV_QP_EX_WITH_SEND);
	struct ibv_qp *qb = qp_ex(e, cq, s, IBV_QP_EX_WITH_SEND);
	connect_qp(e, qa, qb->qp_num, IBV_QPT_RC);
	connect_qp(e, qb, qa->qp_num, IBV_QPT_RC);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge g = { (uintptr_t)e->b + i * 512, 512, e->mrb->lkey };
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &g, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(s, &r, &bad))
			fail("ibv_post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	if (ibv_modify_srq(s, &lim, IBV_SRQ_LIMIT))
		fail("ibv_modify_srq");
	struct ibv_srq_attr got;
	if (ibv_query_srq(s, &got) || got.srq_limit != 3 || got.max_wr != 16)
		fail("ibv_query_srq: limit %u max_wr %u", got.srq_limit, got.max_wr);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	ibv_wr_start(x);
	x->wr_id = 31;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 16);
	x->wr_id = 32;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, e->mra->lkey, (uintptr_t)e->a, 16);
	if (ibv_wr_complete(x))
		fail("ibv_wr_complete");
	struct ex_wc w[4];
	poll_ex(cq, w, 4);
	for (int i = 0; i < 4; i++)
		if (w[i].status || (w[i].opcode == IBV_WC_RECV && w[i].wr_id < 100))
			fail("completion %d", i);
	/* Two of four receives taken, fewer than 3 left: the limit event. */
	struct ibv_async_event ev = wait_event(e, IBV_EVENT_SRQ_LIMIT_REACHED);
	if (ev.element.srq != s)
		fail("the event names another SRQ");
	ibv_ack_async_event(&ev);
	errno = 0;
	if (ibv_get_async_event(e->ctx, &ev) == 0 || errno != EAGAIN)
		fail("a second event from nowhere (type %d)", ev.event_type);
	ok();

	check = "last WQE reached when an SRQ's QP enters the error state";
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qb, &err, IBV_QP_STATE))
		fail("modify to ERR");
	ev = wait_event(e, IBV_EVENT_QP_LAST_WQE_REACHED);
	if (ev.element.qp != qb)
		fail("the event names another QP");
	ibv_ack_async_event(&ev);
	ok();
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_srq(s);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

static void overflow(struct env *e)
{
	check = "a CQ that overflows raises CQ error and QP fatal";
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 1, NULL, NULL, 0);
	if (!cq)
		fail("ibv_create_cq");
	/* softib makes CQs of at least 256 entries (cq->cqe says what was asked); 300 receive
	 * and 300 send completions left unpolled overflow it. */
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 300, .max_recv_wr = 300, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	struct ibv_qp *q = ibv_create_qp(e->pd, &ia);
	if (!q)
		fail("ibv_create_qp");
	connect_qp(e, q, q->qp_num, IBV_QPT_RC);
	for (int i = 0; i < 300; i++)
		post_recv(q, e->mrb, e->b, i);
	struct ibv_sge g = { (uintptr_t)e->a, 8, e->mra->lkey };
	for (int i = 0; i < 300; i++) {
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &g, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bad;
		if (ibv_post_send(q, &wr, &bad))
			break;
	}
	struct ibv_async_event ev = wait_event(e, IBV_EVENT_CQ_ERR);
	if (ev.element.cq != cq)
		fail("the CQ error names another CQ");
	ibv_ack_async_event(&ev);
	ev = wait_event(e, IBV_EVENT_QP_FATAL);
	if (ev.element.qp != q)
		fail("the QP fatal names another QP");
	ibv_ack_async_event(&ev);
	ok();
	ibv_destroy_qp(q);
	ibv_destroy_cq(cq);
}

/* Threads posting and polling at once on one context, each on its own QP and CQ. */
struct worker {
	struct env *e;
	int id;
	int done;
};

#include <pthread.h>
#define THREADS 4
#define THREAD_SENDS 200

static void *work(void *arg)
{
	struct worker *w = arg;
	struct env *e = w->e;
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	struct ibv_qp *q = cq ? ibv_create_qp(e->pd, &ia) : NULL;
	if (!q)
		return NULL;
	connect_qp(e, q, q->qp_num, IBV_QPT_RC);
	char *buf = e->b + 2048 + w->id * 256;
	for (int i = 0; i < THREAD_SENDS; i++) {
		post_recv(q, e->mrb, buf, i);
		struct ibv_sge g = { (uintptr_t)e->a + w->id * 64, 8, e->mra->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &g, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bad;
		if (ibv_post_send(q, &wr, &bad))
			return NULL;
		struct ibv_wc wc[2];
		poll_legacy(cq, wc, 2);
		if (wc[0].status || wc[1].status)
			return NULL;
	}
	ibv_destroy_qp(q);
	ibv_destroy_cq(cq);
	w->done = 1;
	return NULL;
}

static void threads(struct env *e)
{
	check = "threads posting and polling on one context";
	pthread_t t[THREADS];
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .e = e, .id = i };
		if (pthread_create(&t[i], NULL, work, &w[i]))
			fail("pthread_create");
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		if (!w[i].done)
			fail("thread %d did not finish its %d round trips", i, THREAD_SENDS);
	}
	ok();
}

int main(int argc, char **argv)
{
	struct env e = {};
	if (argc != 3) {
		fprintf(stderr, "usage: %s DEVICE GID_INDEX\n", argv[0]);
		return 2;
	}
	e.gid_index = atoi(argv[2]);
	device(&e, argv[1]);
	memory(&e);
	wr_api(&e);
	legacy(&e);
	srq(&e);
	overflow(&e);
	threads(&e);
	check = "cleanup";
	if (ibv_dereg_mr(e.mra) || ibv_dereg_mr(e.mrb) || ibv_dealloc_pd(e.pd) ||
	    ibv_close_device(e.ctx))
		fail("teardown");
	ok();
	return 0;
}
