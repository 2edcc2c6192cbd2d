// The C ABI's contract on a machine without a GPU: every entry point answers
// a bad argument or a null handle with a status and a message naming the
// cause, never a crash; creating a Buffer without a GPU says why.
#ifdef EPKIT_WITH_CUDA
#include <epkit/ep.h>
#include <epkit/ep_c.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

namespace {

std::string last_error() {
  return epkit_ep_last_error();
}

int gather_copy(void* /*user*/, const void* mine, size_t bytes, void* out) {
  std::memcpy(out, mine, bytes);
  return 0;
}

TEST(EpCapi, VersionAndNames) {
  EXPECT_EQ(epkit_ep_abi_version(), EPKIT_EP_ABI_VERSION);
  EXPECT_STREQ(epkit_ep_version(), EPKIT_VERSION);
  EXPECT_STREQ(epkit_ep_status_name(EPKIT_EP_OK), "ok");
  EXPECT_STREQ(epkit_ep_status_name(EPKIT_EP_ERR_UNAVAILABLE), "unavailable");
  EXPECT_STREQ(epkit_ep_status_name(99), "unknown");
}

TEST(EpCapi, DefaultsMatchTheCppApi) {
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  epkit::ep::BufferOptions cpp;
  EXPECT_EQ(o.max_tokens, cpp.max_tokens);
  EXPECT_EQ(o.max_hidden, cpp.max_hidden);
  EXPECT_EQ(o.max_topk, cpp.max_topk);
  EXPECT_DOUBLE_EQ(o.timeout_s, cpp.timeout_s);
  epkit_ep_config c{};
  ASSERT_EQ(epkit_ep_default_config(&c), EPKIT_EP_OK);
  EXPECT_EQ(c.num_sms, epkit::ep::Config{}.num_sms);
  EXPECT_EQ(c.nvl_chunk, epkit::ep::Config{}.nvl_chunk);
  EXPECT_EQ(epkit_ep_default_options(nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_default_config(nullptr), EPKIT_EP_ERR_INVALID);
}

TEST(EpCapi, BytesNeeded) {
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  uint64_t bytes = 0;
  ASSERT_EQ(epkit_ep_bytes_needed(&o, 4, &bytes), EPKIT_EP_OK);
  EXPECT_EQ(bytes, epkit::ep::Buffer::bytes_needed(epkit::ep::BufferOptions{}, 4));
  EXPECT_EQ(epkit_ep_bytes_needed(&o, 9, &bytes), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("1 to 8 ranks"), std::string::npos) << last_error();
  EXPECT_EQ(epkit_ep_bytes_needed(nullptr, 2, &bytes), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_bytes_needed(&o, 2, nullptr), EPKIT_EP_ERR_INVALID);
}

TEST(EpCapi, InternodeSizesAndRankCounts) {
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  EXPECT_EQ(o.ranks_per_node, 0);
  o.max_tokens = 256;
  o.ranks_per_node = 8;
  epkit::ep::BufferOptions cpp;
  cpp.max_tokens = 256;
  cpp.ranks_per_node = 8;
  uint64_t bytes = 0;
  ASSERT_EQ(epkit_ep_bytes_needed(&o, 16, &bytes), EPKIT_EP_OK) << last_error();
  EXPECT_EQ(bytes, epkit::ep::Buffer::bytes_needed(cpp, 16));
  EXPECT_GT(bytes, epkit::ep::Buffer::bytes_needed(cpp, 8)) << "the network leg's memory";
  EXPECT_EQ(epkit_ep_bytes_needed(&o, 12, &bytes), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("whole nodes of ranks_per_node = 8"), std::string::npos)
      << last_error();
  EXPECT_EQ(epkit_ep_bytes_needed(&o, 264, &bytes), EPKIT_EP_ERR_INVALID);
  o.ranks_per_node = 9;
  EXPECT_EQ(epkit_ep_bytes_needed(&o, 18, &bytes), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("1 to 8 ranks"), std::string::npos) << last_error();
  o.ranks_per_node = 2;
  epkit_ep_buffer* b = nullptr;
  EXPECT_EQ(epkit_ep_buffer_create(0, 5, gather_copy, nullptr, &o, &b), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("whole nodes"), std::string::npos) << last_error();
}

TEST(EpCapi, OutputArenaNeedsABufferAndIsOffByDefault) {
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  EXPECT_EQ(o.output_arena_bytes, 0u);
  void* data = reinterpret_cast<void*>(1);
  std::uint64_t bytes = 1;
  EXPECT_EQ(epkit_ep_output_arena(nullptr, &data, &bytes), EPKIT_EP_ERR_INVALID);
}

TEST(EpCapi, StructSizesForBindings) {
  EXPECT_EQ(epkit_ep_struct_size("options"), sizeof(epkit_ep_options));
  EXPECT_EQ(epkit_ep_struct_size("combine_args"), sizeof(epkit_ep_combine_args));
  EXPECT_EQ(epkit_ep_struct_size("handle_info"), sizeof(epkit_ep_handle_info));
  EXPECT_EQ(epkit_ep_struct_size("tensor"), sizeof(epkit_ep_tensor));
  EXPECT_EQ(epkit_ep_struct_size("ll_dispatch_args"), sizeof(epkit_ep_ll_dispatch_args));
  EXPECT_EQ(epkit_ep_struct_size("ll_combine_out"), sizeof(epkit_ep_ll_combine_out));
  EXPECT_EQ(epkit_ep_struct_size("dispatch_into"), sizeof(epkit_ep_dispatch_into));
  EXPECT_EQ(epkit_ep_struct_size("dispatch_args"), sizeof(epkit_ep_dispatch_args));
  EXPECT_EQ(epkit_ep_struct_size("dispatch_out"), sizeof(epkit_ep_dispatch_out));
  EXPECT_EQ(epkit_ep_struct_size("no_such_struct"), 0u);
  EXPECT_EQ(epkit_ep_struct_size(nullptr), 0u);
}

TEST(EpCapi, LowLatencySizeHintMatchesTheCppApi) {
  uint64_t bytes = 0;
  ASSERT_EQ(epkit_ep_ll_size_hint(128, 7168, 8, 288, &bytes), EPKIT_EP_OK) << last_error();
  EXPECT_EQ(bytes, epkit::ep::Buffer::low_latency_size_hint(128, 7168, 8, 288));
  EXPECT_EQ(epkit_ep_ll_size_hint(0, 7168, 8, 288, &bytes), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("positive"), std::string::npos) << last_error();
  EXPECT_EQ(epkit_ep_ll_size_hint(128, 7168, 8, 288, nullptr), EPKIT_EP_ERR_INVALID);
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  EXPECT_EQ(o.low_latency_bytes, 0u);
}

TEST(EpCapi, CreateRejectsBadArguments) {
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  epkit_ep_buffer* b = reinterpret_cast<epkit_ep_buffer*>(0x1);
  EXPECT_EQ(epkit_ep_buffer_create(0, 1, nullptr, nullptr, &o, &b), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(b, nullptr) << "out is cleared on failure";
  EXPECT_NE(last_error().find("all_gather is null"), std::string::npos) << last_error();
  EXPECT_EQ(epkit_ep_buffer_create(0, 1, gather_copy, nullptr, nullptr, &b), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_buffer_create(2, 2, gather_copy, nullptr, &o, &b), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("rank 2 of 2"), std::string::npos) << last_error();
  EXPECT_EQ(epkit_ep_buffer_create(0, 9, gather_copy, nullptr, &o, &b), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_buffer_create(0, 1, gather_copy, nullptr, &o, nullptr), EPKIT_EP_ERR_INVALID);
}

TEST(EpCapi, CreateWithoutAGpuSaysWhy) {
  int32_t devices = 0;
  if (epkit_ep_device_count(&devices) == EPKIT_EP_OK) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(devices, 0);
  EXPECT_NE(last_error().find("CUDA"), std::string::npos) << last_error();
  epkit_ep_options o{};
  ASSERT_EQ(epkit_ep_default_options(&o), EPKIT_EP_OK);
  epkit_ep_buffer* b = nullptr;
  EXPECT_EQ(epkit_ep_buffer_create(0, 1, gather_copy, nullptr, &o, &b), EPKIT_EP_ERR_UNAVAILABLE);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(epkit_ep_set_device(0), EPKIT_EP_OK);
  EXPECT_NE(last_error().find("cudaSetDevice(0)"), std::string::npos) << last_error();
  EXPECT_EQ(epkit_ep_buffer_create(0, 1, gather_copy, nullptr, &o, &b), EPKIT_EP_ERR_UNAVAILABLE);
  EXPECT_NE(last_error().find("cannot create an EP Buffer"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("CUDA"), std::string::npos) << last_error();
}

TEST(EpCapi, NullBufferIsAnErrorEverywhere) {
  epkit_ep_tensor t{};
  epkit_ep_order order{};
  epkit_ep_layout_out lo{};
  epkit_ep_dispatch_args da{};
  epkit_ep_dispatch_out dout{};
  epkit_ep_combine_args ca{};
  epkit_ep_combine_out cout{};
  void* event = nullptr;
  int32_t rank = 0;
  EXPECT_EQ(epkit_ep_buffer_info(nullptr, &rank, nullptr, nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_buffer_nodes(nullptr, &rank, nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_layout(nullptr, &t, 8, &order, &lo), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_dispatch(nullptr, &da, &dout), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_combine(nullptr, &ca, &cout), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_combine_input(nullptr, 1, 128, &t), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_copy(nullptr, 1, &t, &t, &order, &event), EPKIT_EP_ERR_INVALID);
  epkit_ep_ll_dispatch_args lda{};
  epkit_ep_ll_dispatch_out ldo{};
  epkit_ep_ll_combine_args lca{};
  epkit_ep_ll_combine_out lco{};
  epkit_ep_ll_handle lh{};
  EXPECT_EQ(epkit_ep_ll_dispatch(nullptr, &lda, &ldo), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_ll_combine(nullptr, &lca, &lco), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_ll_next_combine_buffer(nullptr, &lh, &t), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_ll_clean(nullptr, 128, 7168, 288), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_hook_call(nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_barrier(nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_synchronize(nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_NE(last_error().find("buffer is null"), std::string::npos) << last_error();
  epkit_ep_handle_info info{};
  EXPECT_EQ(epkit_ep_handle_info_get(nullptr, &info), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_event_wait(nullptr, nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_event_synchronize(nullptr), EPKIT_EP_ERR_INVALID);
  EXPECT_EQ(epkit_ep_event_record(nullptr, nullptr), EPKIT_EP_ERR_INVALID);
  // Releasing nothing is a no-op, as free(NULL).
  epkit_ep_buffer_destroy(nullptr);
  epkit_ep_handle_release(nullptr);
  epkit_ep_event_destroy(nullptr);
  epkit_ep_hook_release(nullptr);
}

TEST(EpCapi, LastErrorIsPerThread) {
  uint64_t bytes = 0;
  ASSERT_EQ(epkit_ep_bytes_needed(nullptr, 2, &bytes), EPKIT_EP_ERR_INVALID);
  std::string here = last_error();
  std::string there = "unset";
  std::thread t([&] { there = last_error(); });
  t.join();
  EXPECT_EQ(there, "");
  EXPECT_EQ(last_error(), here);
}

}  // namespace
#endif
