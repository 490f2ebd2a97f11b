// serve/peer.hpp — whether the client of a request that is waiting for its
// answer is still there.
//
// A streaming response learns of a client that left when a write fails, but a
// non-streaming one writes nothing until its answer is complete, and cpp-httplib
// 0.11 (Debian 12) gives a handler no way to see its connection. So the handler
// finds the accepted socket itself: the one of this process whose local port
// and peer address are the request's (a TCP connection's address pair is unique,
// and the socket stays open while its worker thread runs the handler).
#pragma once

#include <string>

namespace qhx::serve {

class PeerSocket {
 public:
  // Looks the socket up among the process's open descriptors; not found (an
  // address httplib did not fill, a Unix socket) leaves closed() always false.
  PeerSocket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection: an end of stream
  // with no request bytes before it, a hang-up, or a socket error. Never blocks.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace qhx::serve
