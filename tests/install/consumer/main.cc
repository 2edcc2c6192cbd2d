// Uses the public EP API the way a user's program does: sizes a Buffer and,
// on a machine without GPUs, gets an error naming the cause instead of a
// crash. C++17, to show the public headers do not need C++20.
#include <epkit/ep.h>

#include <cstdio>

namespace {

class OneRank final : public epkit::ep::Bootstrap {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  epkit::Result<std::vector<std::string>> all_gather(const std::string& mine) override {
    return std::vector<std::string>{mine};
  }
};

}  // namespace

int main() {
  epkit::ep::BufferOptions options;  // DeepEP's test sizes
  std::printf("bytes per GPU at 8 ranks: %zu\n", epkit::ep::Buffer::bytes_needed(options, 8));
  OneRank bootstrap;
  options.max_tokens = 128;
  auto buffer = epkit::ep::Buffer::create(bootstrap, options);
  if (buffer) {
    std::printf("buffer on 1 rank: ok\n");
    return 0;
  }
  std::printf("buffer on 1 rank: %s\n", buffer.error().message.c_str());
  return buffer.error().code == epkit::ErrorCode::cuda ? 0 : 3;
}
