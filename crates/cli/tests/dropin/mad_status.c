/* MADs a tool may send wrong, through libibumad.so.3, and what comes back:
 *
 *   mad_status probe CA_LID SWITCH_LID SA_LID
 *       sends each case below once (timeout 1 s, 2 retries) and prints
 *       "CASE status 0xSSSS" for the response, "CASE timeout" when umad_recv gave the send back
 *       with ETIMEDOUT, or "CASE refused ERRNO" when umad_send would not take it; a
 *       umad_recv that gives nothing within 10 s ends the program with exit code 2
 *   mad_status flood LID N
 *       sends N PerfMgt Gets of PortCounters to LID and never reads an answer; prints
 *       "sent N" and sleeps until its stdin closes
 *
 * Every failure of the library itself exits non-zero naming the call. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/umad.h>

#define SMI_LID_CLASS 0x01
#define SA_CLASS 0x03
#define PERF_CLASS 0x04

static void die(const char *what, int r) {
    fprintf(stderr, "%s failed: %d (%s)\n", what, r, strerror(errno));
    exit(1);
}

/* The common MAD header (IBA §13.4.3) of a request; the rest of the 256 bytes stays 0. */
static void header(uint8_t *m, uint8_t base, uint8_t cls, uint8_t version, uint8_t method,
                   uint16_t attr, uint32_t tid) {
    memset(m, 0, 256);
    m[0] = base;
    m[1] = cls;
    m[2] = version;
    m[3] = method;
    m[12] = tid >> 24;
    m[13] = tid >> 16;
    m[14] = tid >> 8;
    m[15] = tid;
    m[16] = attr >> 8;
    m[17] = attr;
}

struct agents {
    int fd, smi, sa, perf;
};

/* Sends `len` bytes of `mad` to `lid` (QP0 for SMPs, QP1 otherwise) and prints what came of
 * it. */
static void probe(struct agents *a, const char *name, int agent, int lid, const uint8_t *mad,
                  int len) {
    size_t size = umad_size() + 256;
    void *u = calloc(1, size + 256 * 8);
    int qp = agent == a->smi ? 0 : 1;
    umad_set_addr(u, lid, qp, 0, qp ? 0x80010000 : 0);
    memcpy(umad_get_mad(u), mad, 256);
    int r = umad_send(a->fd, agent, u, len, 1000, 2);
    if (r < 0) {
        printf("%s refused %d\n", name, errno);
        free(u);
        return;
    }
    for (;;) {
        int got = 256 * 8;
        r = umad_recv(a->fd, u, &got, 10000);
        if (r < 0) {
            fprintf(stderr, "%s: nothing from umad_recv within 10 s (%d, %s)\n", name, r,
                    strerror(errno));
            exit(2);
        }
        if (r != agent)
            continue;
        if (umad_status(u) == ETIMEDOUT) {
            printf("%s timeout\n", name);
        } else {
            uint8_t *m = umad_get_mad(u);
            printf("%s status 0x%04x\n", name, (m[4] << 8) | m[5]);
        }
        break;
    }
    free(u);
}

static struct agents open_agents(void) {
    struct agents a;
    if (umad_init() < 0)
        die("umad_init", -1);
    a.fd = umad_open_port(NULL, 0);
    if (a.fd < 0)
        die("umad_open_port", a.fd);
    a.smi = umad_register(a.fd, SMI_LID_CLASS, 1, 0, NULL);
    if (a.smi < 0)
        die("umad_register(SMI)", a.smi);
    a.sa = umad_register(a.fd, SA_CLASS, 2, 1, NULL);
    if (a.sa < 0)
        die("umad_register(SA)", a.sa);
    a.perf = umad_register(a.fd, PERF_CLASS, 1, 0, NULL);
    if (a.perf < 0)
        die("umad_register(PerfMgt)", a.perf);
    return a;
}

int main(int argc, char **argv) {
    uint8_t m[256];
    if (argc == 5 && !strcmp(argv[1], "probe")) {
        int ca = atoi(argv[2]), sw = atoi(argv[3]), sa = atoi(argv[4]);
        struct agents a = open_agents();
        /* SMPs to the switch's SMA. */
        header(m, 1, SMI_LID_CLASS, 1, 0x01, 0x0011, 1);
        probe(&a, "smp-nodeinfo", a.smi, sw, m, 256);
        header(m, 2, SMI_LID_CLASS, 1, 0x01, 0x0011, 2);
        probe(&a, "smp-base-version", a.smi, sw, m, 256);
        header(m, 1, SMI_LID_CLASS, 7, 0x01, 0x0011, 3);
        probe(&a, "smp-class-version", a.smi, sw, m, 256);
        header(m, 1, SMI_LID_CLASS, 1, 0x04, 0x0011, 4);
        probe(&a, "smp-method", a.smi, sw, m, 256);
        header(m, 1, SMI_LID_CLASS, 1, 0x01, 0x00ee, 5);
        probe(&a, "smp-attribute", a.smi, sw, m, 256);
        /* The PMA of a CA and of a switch (port 0, for every port). */
        for (int i = 0; i < 2; i++) {
            int lid = i ? sw : ca;
            char name[64];
            header(m, 1, PERF_CLASS, 1, 0x01, 0x0012, 10 + i * 10);
            m[65] = 1; /* PortCounters.PortSelect (the data starts at byte 64) */
            snprintf(name, sizeof name, "pma-%s-counters", i ? "switch" : "ca");
            probe(&a, name, a.perf, lid, m, 256);
            header(m, 1, PERF_CLASS, 9, 0x01, 0x0012, 11 + i * 10);
            snprintf(name, sizeof name, "pma-%s-class-version", i ? "switch" : "ca");
            probe(&a, name, a.perf, lid, m, 256);
            header(m, 1, PERF_CLASS, 1, 0x01, 0x00ee, 12 + i * 10);
            snprintf(name, sizeof name, "pma-%s-attribute", i ? "switch" : "ca");
            probe(&a, name, a.perf, lid, m, 256);
            header(m, 1, PERF_CLASS, 1, 0x12, 0x0012, 13 + i * 10);
            snprintf(name, sizeof name, "pma-%s-method", i ? "switch" : "ca");
            probe(&a, name, a.perf, lid, m, 256);
        }
        /* The SA. */
        header(m, 1, SA_CLASS, 2, 0x01, 0x0011, 40);
        probe(&a, "sa-noderecord", a.sa, sa, m, 256);
        header(m, 1, SA_CLASS, 1, 0x01, 0x0011, 41);
        probe(&a, "sa-class-version", a.sa, sa, m, 256);
        header(m, 1, SA_CLASS, 2, 0x01, 0x00ee, 42);
        probe(&a, "sa-attribute", a.sa, sa, m, 256);
        header(m, 1, SA_CLASS, 2, 0x13, 0x0011, 43);
        probe(&a, "sa-method", a.sa, sa, m, 256);
        /* Shorter than a MAD header: the library refuses it (the kernel's umad: EINVAL). */
        header(m, 1, PERF_CLASS, 1, 0x01, 0x0012, 50);
        probe(&a, "short", a.perf, ca, m, 16);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "flood")) {
        int lid = atoi(argv[2]), n = atoi(argv[3]);
        struct agents a = open_agents();
        void *u = calloc(1, umad_size() + 256);
        umad_set_addr(u, lid, 1, 0, 0x80010000);
        for (int i = 0; i < n; i++) {
            header(m, 1, PERF_CLASS, 1, 0x01, 0x0012, 1000 + i);
            m[65] = 1;
            memcpy(umad_get_mad(u), m, 256);
            /* No timeout: the library keeps nothing of it, as the kernel keeps no send. */
            int r = umad_send(a.fd, a.perf, u, 256, 0, 0);
            if (r < 0)
                die("umad_send", r);
        }
        printf("sent %d\n", n);
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
        return 0;
    }
    fprintf(stderr, "usage: mad_status probe CA_LID SWITCH_LID SA_LID | flood LID N\n");
    return 2;
}
