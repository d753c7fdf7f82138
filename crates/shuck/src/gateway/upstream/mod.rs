//! The gateway core's backend side for servers that speak HTTP/2 (`proto = h2`): beside
//! the HTTP/1.1 keep-alive connections each client connection keeps (`backends.rs`), a
//! worker's connections to each such server are shared by all its clients and carry
//! many streams at once (`pool.rs`); a stream is served on one (`stream.rs`, its body up in `upload.rs`) from a head
//! judged as HTTP/1.1's is (`head.rs`). gRPC rides it end to end.

pub mod head;
pub mod pool;
pub mod stream;
pub mod upload;
