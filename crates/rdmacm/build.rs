//! Gives every exported symbol its rdma-core version (RDMACM_1.0 ... RDMACM_1.3) from
//! `exports.txt`, and the library rdma-core's soname: see `softib-symver` for how and why.

fn main() {
    softib_symver::generate("librdmacm.so.1");
}
