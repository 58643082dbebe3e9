/* RDMA_PS_IB endpoints over IPv4 addresses, checked against librdmacm.so.1: the port space
 * that holds both connected and datagram services (rdma_xserver/rdma_xclient use it for XRC).
 *
 *   cm_ps_ib server PORT          an RC endpoint listening on RDMA_PS_IB PORT; receives one
 *                                 message and prints it
 *   cm_ps_ib client ADDR PORT     connects an RC endpoint to it and sends "ps-ib hello"
 *
 * Every step prints "ok ..." or exits non-zero naming what failed. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static void die(const char *what) {
    perror(what);
    exit(1);
}

static struct rdma_addrinfo *lookup(const char *node, const char *port, int passive) {
    struct rdma_addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_port_space = RDMA_PS_IB;
    hints.ai_qp_type = IBV_QPT_RC;
    if (passive)
        hints.ai_flags = RAI_PASSIVE;
    int ret = rdma_getaddrinfo(node, port, &hints, &res);
    if (ret) {
        fprintf(stderr, "rdma_getaddrinfo: %s\n", gai_strerror(ret));
        exit(1);
    }
    if (res->ai_port_space != RDMA_PS_IB) {
        fprintf(stderr, "rdma_getaddrinfo gave port space 0x%x\n", res->ai_port_space);
        exit(1);
    }
    return res;
}

static void caps(struct ibv_qp_init_attr *qa) {
    memset(qa, 0, sizeof *qa);
    qa->cap.max_send_wr = qa->cap.max_recv_wr = 2;
    qa->cap.max_send_sge = qa->cap.max_recv_sge = 1;
    qa->sq_sig_all = 1;
}

int main(int argc, char **argv) {
    static char buf[64];
    struct ibv_qp_init_attr qa;
    struct ibv_wc wc;
    struct rdma_cm_id *id;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 3 && !strcmp(argv[1], "server")) {
        struct rdma_cm_id *listen_id;
        struct rdma_addrinfo *res = lookup(NULL, argv[2], 1);
        caps(&qa);
        if (rdma_create_ep(&listen_id, res, NULL, &qa))
            die("rdma_create_ep");
        rdma_freeaddrinfo(res);
        if (rdma_listen(listen_id, 1))
            die("rdma_listen");
        printf("ok listening on RDMA_PS_IB\n");
        if (rdma_get_request(listen_id, &id))
            die("rdma_get_request");
        if (id->ps != RDMA_PS_IB || !id->qp || id->qp->qp_type != IBV_QPT_RC) {
            fprintf(stderr, "the request's id: ps 0x%x qp %p\n", id->ps, (void *)id->qp);
            return 1;
        }
        struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
        if (!mr)
            die("rdma_reg_msgs");
        if (rdma_post_recv(id, NULL, buf, sizeof buf, mr))
            die("rdma_post_recv");
        if (rdma_accept(id, NULL))
            die("rdma_accept");
        if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
            die("rdma_get_recv_comp");
        printf("ok received: %s\n", buf);
        rdma_disconnect(id);
        rdma_dereg_mr(mr);
        rdma_destroy_ep(id);
        rdma_destroy_ep(listen_id);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "client")) {
        struct rdma_addrinfo *res = lookup(argv[2], argv[3], 0);
        caps(&qa);
        if (rdma_create_ep(&id, res, NULL, &qa))
            die("rdma_create_ep");
        rdma_freeaddrinfo(res);
        strcpy(buf, "ps-ib hello");
        struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
        if (!mr)
            die("rdma_reg_msgs");
        if (rdma_connect(id, NULL))
            die("rdma_connect");
        printf("ok connected over RDMA_PS_IB\n");
        if (rdma_post_send(id, NULL, buf, strlen(buf) + 1, mr, 0))
            die("rdma_post_send");
        if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
            die("rdma_get_send_comp");
        printf("ok sent\n");
        rdma_disconnect(id);
        rdma_dereg_mr(mr);
        rdma_destroy_ep(id);
        return 0;
    }
    fprintf(stderr, "usage: cm_ps_ib server PORT | client ADDR PORT\n");
    return 2;
}
