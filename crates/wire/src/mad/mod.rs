//! Management datagrams (MADs): being written.
