//! Gives every exported symbol its rdma-core version (IBUMAD_1.0, 1.1, 1.2) from
//! `exports.txt`, and the library rdma-core's soname: see `softib-symver`.

fn main() {
    softib_symver::generate("libibumad.so.3");
}
