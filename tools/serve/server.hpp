// serve/server.hpp — the HTTP side of qhx_serve: routes, authentication, errors,
// streaming, on cpp-httplib; the model side is serve/queue.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "qhexrt/pipeline.hpp"
#include "serve/metrics.hpp"
#include "serve/queue.hpp"
#include "serve/request.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace qhx::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port
  std::string api_key;  // "" = no authentication
  std::string model_id;
  std::size_t max_queue = 16;
  std::size_t max_body_mb = 32;
  std::size_t sessions = 1;
  std::size_t http_threads = 0;  // 0: max_queue + 8
  int max_images = 8;
  std::optional<std::filesystem::path> allow_file_dir;
  int read_timeout_s = 30, write_timeout_s = 15, keep_alive_timeout_s = 5;
  int retry_after_s = 2;
  int send_buffer_kb = 64;     // SO_SNDBUF of the connections (0: the kernel's autotuning)
  std::int64_t speculate = 0;  // n-gram draft length of every answer (GenerationOptions::speculate)
};

class Server {
 public:
  Server(Pipeline& pipeline, ServerConfig config);
  ~Server();

  int bind();     // returns the port bound; throws qhx::Error when it cannot
  bool listen();  // serves until stop(); false if the server could not run
  // SIGTERM: refuse what is queued, let the running generation finish within
  // `grace` (then cancel it), answer what is in flight, and make listen() return.
  void drain_and_stop(std::chrono::milliseconds grace);

 private:
  void chat(const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  void send_error(httplib::Response& res, const ApiError& e) const;

  Pipeline& pipeline_;
  ServerConfig config_;
  RequestLimits limits_;
  Metrics metrics_;
  ModelQueue queue_;
  std::unique_ptr<httplib::Server> http_;
  std::int64_t started_ = 0;
};

}  // namespace qhx::serve
