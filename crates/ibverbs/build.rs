//! Gives every exported symbol its rdma-core version (IBVERBS_1.0 ... IBVERBS_1.14, and
//! IBVERBS_PRIVATE_34) from `exports.txt`, and the library rdma-core's soname: see
//! `../verbs-abi/build_support/exports.rs`, which librdmacm's build shares.

include!("../verbs-abi/build_support/exports.rs");

fn main() {
    generate_exports("exports.txt", "libibverbs.so.1", "libibverbs.map");
}
