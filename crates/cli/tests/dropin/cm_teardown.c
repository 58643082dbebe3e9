/* How programs tear rdma_cm connections down, checked against librdmacm.so.1:
 *
 *   cm_teardown server ADDR PORT   accepts one connection, disconnects 300 ms after it is
 *                                  established, waits for DISCONNECTED
 *   cm_teardown client ADDR PORT   connects; a thread of its own takes the DISCONNECTED the
 *                                  server's DREQ gives, which leaves the QP as it was, and
 *                                  then waits on the channel while the main thread destroys it;
 *                                  an event queued for an id that is destroyed before anyone
 *                                  took it is not handed out with the next id's
 *
 * Every step prints "ok ..." or exits non-zero naming what failed. */
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

static void die(const char *what) {
    perror(what);
    exit(1);
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev))
        die("rdma_get_cm_event");
    if (ev->event != t) {
        fprintf(stderr, "expected %s, got %s, error: %d\n", rdma_event_str(t),
                rdma_event_str(ev->event), ev->status);
        exit(1);
    }
    return ev;
}

static struct sockaddr_in addr_of(const char *ip, const char *port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)atoi(port));
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", ip);
        exit(2);
    }
    return a;
}

static void make_qp(struct rdma_cm_id *id) {
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, NULL, &qa))
        die("rdma_create_qp");
}

static int server(const char *ip, const char *port) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *listener, *id;
    struct sockaddr_in a = addr_of(ip, port);
    if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP))
        die("rdma_create_id");
    if (rdma_bind_addr(listener, (struct sockaddr *)&a) || rdma_listen(listener, 1))
        die("rdma_listen");
    printf("listening\n");
    fflush(stdout);
    struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    id = ev->id;
    rdma_ack_cm_event(ev);
    make_qp(id);
    struct rdma_conn_param p;
    memset(&p, 0, sizeof p);
    if (rdma_accept(id, &p))
        die("rdma_accept");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
    usleep(300 * 1000);
    if (rdma_disconnect(id))
        die("rdma_disconnect");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(ch);
    printf("ok server\n");
    return 0;
}

struct waiter {
    struct rdma_event_channel *ch;
    sem_t disconnected;
    volatile int returned;
};

/* rping's CM thread: takes events until the process ends. */
static void *cm_thread(void *arg) {
    struct waiter *w = arg;
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(w->ch, &ev)) {
            w->returned = 1;
            perror("rdma_get_cm_event on the CM thread");
            exit(1);
        }
        int disconnected = ev->event == RDMA_CM_EVENT_DISCONNECTED;
        rdma_ack_cm_event(ev);
        if (disconnected)
            sem_post(&w->disconnected);
    }
    return NULL;
}

static void resolve(struct rdma_cm_id *id, struct sockaddr_in *a) {
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)a, 2000))
        die("rdma_resolve_addr");
}

static int client(const char *ip, const char *port) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id;
    struct sockaddr_in a = addr_of(ip, port);
    if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
        die("rdma_create_id");
    resolve(id, &a);
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(id, 2000))
        die("rdma_resolve_route");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    make_qp(id);
    struct rdma_conn_param p;
    memset(&p, 0, sizeof p);
    p.retry_count = 7;
    if (rdma_connect(id, &p))
        die("rdma_connect");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));

    /* The server's DREQ comes 300 ms after ESTABLISHED, to the CM thread. */
    struct waiter w = {.ch = ch, .returned = 0};
    sem_init(&w.disconnected, 0, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, cm_thread, &w))
        die("pthread_create");
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    if (sem_timedwait(&w.disconnected, &until))
        die("waiting 10 s for DISCONNECTED on the CM thread");
    /* rdma-core leaves the QP alone on DISCONNECTED: the program may have destroyed it with
     * ibv_destroy_qp already, while id->qp still points at it (rping does). */
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    if (ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qi))
        die("ibv_query_qp");
    if (qa.qp_state != IBV_QPS_RTS) {
        fprintf(stderr, "DISCONNECTED moved the QP to state %d\n", qa.qp_state);
        return 1;
    }
    printf("ok DISCONNECTED leaves the QP as it was\n");
    rdma_destroy_qp(id);
    rdma_destroy_id(id);

    /* The CM thread waits on the channel; the main thread takes it away. */
    usleep(100 * 1000);
    rdma_destroy_event_channel(ch);
    usleep(200 * 1000);
    if (w.returned) {
        fprintf(stderr, "rdma_get_cm_event returned on a destroyed channel\n");
        return 1;
    }
    printf("ok a thread waiting on a destroyed channel keeps waiting\n");

    /* An event nobody took goes with its id. */
    struct rdma_event_channel *ch2 = rdma_create_event_channel();
    struct rdma_cm_id *gone, *next;
    if (!ch2 || rdma_create_id(ch2, &gone, NULL, RDMA_PS_TCP) ||
        rdma_create_id(ch2, &next, NULL, RDMA_PS_TCP))
        die("rdma_create_id");
    resolve(gone, &a);
    usleep(100 * 1000);
    rdma_destroy_id(gone);
    resolve(next, &a);
    struct rdma_cm_event *ev = expect(ch2, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (ev->id != next) {
        fprintf(stderr, "the event of a destroyed id was handed out\n");
        return 1;
    }
    rdma_ack_cm_event(ev);
    rdma_destroy_id(next);
    rdma_destroy_event_channel(ch2);
    printf("ok an event queued for a destroyed id is dropped with it\n");
    /* The CM thread is still blocked, as rping's is when it exits. */
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "server"))
        return server(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "client"))
        return client(argv[2], argv[3]);
    fprintf(stderr, "usage: cm_teardown server|client ADDR PORT\n");
    return 2;
}
