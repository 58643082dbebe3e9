//! Gives every exported symbol its rdma-core version (IBVERBS_1.0 ... IBVERBS_1.14, and
//! IBVERBS_PRIVATE_34) from `exports.txt`, and the library rdma-core's soname: see
//! `softib-symver` for how and why.

fn main() {
    softib_symver::generate("libibverbs.so.1");
}
