//! Gives every exported symbol its rdma-core version (RDMACM_1.0 ... RDMACM_1.3) from
//! `exports.txt`, and the library rdma-core's soname: see
//! `../verbs-abi/build_support/exports.rs`, which libibverbs' build shares.

include!("../verbs-abi/build_support/exports.rs");

fn main() {
    generate_exports("exports.txt", "librdmacm.so.1", "librdmacm.map");
}
