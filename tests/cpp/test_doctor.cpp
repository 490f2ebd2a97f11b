// qhx_doctor as a user runs it: the environment (CPU features, kernels, the QAIRT libraries
// and their versions) and plans with a qnn-htp lm-head whose binaries match, target another
// SoC, are missing, or whose libraries are missing. The QAIRT libraries and the binaries come
// from scripts/setup_qnn.sh (as for test_qnn); their absence is a failure.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "doctor/qairt_version.hpp"
#include "test_support.hpp"
#include "text_plan.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;

struct DoctorRun {
  int status = -1;
  std::string out, err;
};

// qhx_doctor ARGS with `env` ("NAME=value ...") before it, through the shell.
DoctorRun doctor(const std::string& args, const std::string& env = "") {
  test::TempDir dir;
  const auto out = dir.path() / "stdout";
  const auto err = dir.path() / "stderr";
  const std::string cmd =
      env + " " + (test::bin_dir() / "qhx_doctor").string() + " " + args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  DoctorRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = test::read_file(out);
  r.err = test::read_file(err);
  return r;
}

nlohmann::json doctor_json(const std::string& args, int expect_status, const std::string& env = "") {
  const DoctorRun r = doctor("--json " + args, env);
  EXPECT_EQ(r.status, expect_status) << r.out << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not one JSON object on stdout: " << e.what() << "\n" << r.out;
    return nlohmann::json::object();
  }
}

fs::path graphs_dir() {
  const fs::path d = test::cache_dir() / "qnn/graphs/tiny_a";
  if (!fs::exists(d / "qhx_stamp.json"))
    ADD_FAILURE() << d << " has no complete set of QNN graphs: run scripts/setup_qnn.sh";
  return d;
}
fs::path checkpoint_dir() { return test::cache_dir() / "reference/tiny_a/checkpoint"; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A text plan on the tiny_a checkpoint with `lm_head` as its lm-head graph, written to dir.
fs::path write_plan(const test::TempDir& dir, const nlohmann::json& lm_head, const std::string& name = "plan.json") {
  const fs::path ck = checkpoint_dir();
  nlohmann::json j = test::text_plan(ck, lm_head);
  j["name"] = "doctor-test";
  const fs::path p = dir.path() / name;
  std::ofstream(p) << j.dump(1);
  return p;
}

nlohmann::json qnn_lm_head(const fs::path& bin, int soc_model = 69) {
  return {{"backend", "qnn-htp"},
          {"kind", "qnn.context_graph"},
          {"context_binary", bin.string()},
          {"soc_model", soc_model},
          {"row_blocks", true}};
}

TEST(QhxDoctor, EnvironmentNamesTheIsaAndTheKernels) {
  const DoctorRun r = doctor("");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  const auto j = doctor_json("", 0);
  const auto& cpu = j["cpu"];
#if defined(__x86_64__)
  EXPECT_EQ(cpu["arch"], "x86_64");
  // This CI machine has AVX-512 VNNI (docs: the int8 kernels); every x86-64 CPU Highway targets has SSE4.2.
  EXPECT_NE(std::find(cpu["features"].begin(), cpu["features"].end(), "sse4.2"), cpu["features"].end()) << cpu;
#elif defined(__aarch64__)
  EXPECT_EQ(cpu["arch"], "aarch64");
  EXPECT_NE(std::find(cpu["features"].begin(), cpu["features"].end(), "asimd"), cpu["features"].end()) << cpu;
#endif
  EXPECT_EQ(cpu["kernel_set"], "fast");
  const std::string target = cpu["simd_target"];
  ASSERT_FALSE(target.empty());
  EXPECT_EQ(cpu["simd_targets"][0], target) << "the dispatched target is the best one supported";
  const std::string int8 = cpu["int8_kernel"];
  EXPECT_NE(std::find(cpu["int8_kernels"].begin(), cpu["int8_kernels"].end(), int8), cpu["int8_kernels"].end());
  EXPECT_GE(cpu["threads"].get<int>(), 1);
  EXPECT_GE(cpu["hardware_threads"].get<int>(), cpu["threads"].get<int>());
  // The text names them too.
  EXPECT_TRUE(has(r.out, "ISA features")) << r.out;
  EXPECT_TRUE(has(r.out, "dispatched to " + target)) << r.out;
  EXPECT_TRUE(has(r.out, "int8 kernel     " + int8)) << r.out;
  for (const auto& f : cpu["features"]) EXPECT_TRUE(has(r.out, f.get<std::string>())) << r.out;
}

TEST(QhxDoctor, ReportsTheQairtLibrariesAndTheirVersions) {
  graphs_dir();
  const auto j = doctor_json("", 0);
  const auto& q = j["qnn"];
  ASSERT_TRUE(q["loaded"].get<bool>()) << q;
  // The pinned onnxruntime-qnn 2.7.0 wheel's QAIRT 2.51.0 (docs/qnn.md, "What runs").
  EXPECT_TRUE(has(q["build_id"], "2.51.0")) << q;
  EXPECT_EQ(q["core_api"], "2.40.0");
  EXPECT_EQ(q["backend_api"], "5.51.0");
  EXPECT_EQ(q["system_api"], "1.15.0");
  ASSERT_EQ(q["libraries"].size(), 2u);
  EXPECT_EQ(q["libraries"][0]["name"], "libQnnHtp.so");
  EXPECT_EQ(q["libraries"][1]["name"], "libQnnSystem.so");
  for (const auto& l : q["libraries"]) {
    const fs::path p = l["path"].get<std::string>();
    EXPECT_EQ(p.filename(), l["name"].get<std::string>());
    EXPECT_TRUE(fs::exists(p)) << p;
  }
  const DoctorRun r = doctor("");
  EXPECT_TRUE(has(r.out, "core 2.40.0, HTP backend 5.51.0, System 1.15.0")) << r.out;
  EXPECT_TRUE(has(r.out, q["build_id"].get<std::string>())) << r.out;
  EXPECT_FALSE(has(r.out, "LIBNATIVE")) << "the libraries' banner goes to stderr";
}

TEST(QhxDoctor, AMatchingPlanIsOkWithItsBinaryGraphsAndMemory) {
  const fs::path dir = graphs_dir();
  test::TempDir tmp;
  const fs::path plan = write_plan(tmp, qnn_lm_head(dir / "lm_head.bin"));
  const auto j = doctor_json(plan.string(), 0);
  EXPECT_TRUE(j["problems"].empty()) << j["problems"];
  const auto& m = j["manifest"];
  EXPECT_EQ(m["name"], "doctor-test");
  nlohmann::json lm;
  for (const auto& g : m["graphs"])
    if (g["name"] == "lm_head") lm = g;
  ASSERT_FALSE(lm.is_null()) << m;
  EXPECT_EQ(lm["backend"], "qnn-htp");
  EXPECT_EQ(lm["kind"], "qnn.context_graph");
  ASSERT_EQ(lm["binaries"].size(), 1u);
  const auto& b = lm["binaries"][0];
  EXPECT_EQ(b["key"], "context_binary");
  EXPECT_EQ(b["soc_model"], 69);
  EXPECT_EQ(b["plan_soc_model"], 69);
  EXPECT_EQ(b["bytes"], fs::file_size(dir / "lm_head.bin"));
  const std::string graph = read_json(dir / "lm_head.json")["graph"];
  EXPECT_EQ(b["graphs"], nlohmann::json::array({graph}));
  EXPECT_EQ(b["build_id"], j["qnn"]["build_id"]);
  // Memory: the files mapped (the checkpoint once, though two entries name it, and the binary)
  // and the KV cache, context x layers x kv heads x head dim x 2 (K and V) x 4 bytes (f32).
  const auto cfg = read_json(checkpoint_dir() / "config.json")["text_config"];
  const std::uint64_t kv = 256ull * cfg["num_hidden_layers"].get<std::uint64_t>() *
                           cfg["num_key_value_heads"].get<std::uint64_t>() * cfg["head_dim"].get<std::uint64_t>() * 2 *
                           4;
  EXPECT_EQ(m["memory"]["kv_cache_bytes"], kv);
  EXPECT_EQ(m["memory"]["mapped_bytes"],
            fs::file_size(checkpoint_dir() / "model.safetensors") + fs::file_size(dir / "lm_head.bin"));
  EXPECT_GT(m["memory"]["available_bytes"].get<std::uint64_t>(), 0u);
  const DoctorRun r = doctor(plan.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "graph lm_head   qnn-htp qnn.context_graph")) << r.out;
  EXPECT_TRUE(has(r.out, graph)) << r.out;
  EXPECT_TRUE(has(r.out, "SoC model   69 (SM8750, HTP v79; plan: 69, matches)")) << r.out;
  EXPECT_TRUE(has(r.out, "\nOK\n")) << r.out;
}

TEST(QhxDoctor, TheKvCacheOfEachElementType) {
  // A row of head_dim values per token, layer, KV head, key and value: 4 or 2 bytes a
  // value, or (the 8-bit cache) 1 byte a value and the row's 4-byte scale.
  const auto cfg = read_json(checkpoint_dir() / "config.json")["text_config"];
  const std::uint64_t rows =
      256ull * cfg["num_hidden_layers"].get<std::uint64_t>() * cfg["num_key_value_heads"].get<std::uint64_t>() * 2;
  const std::uint64_t d = cfg["head_dim"].get<std::uint64_t>();
  for (const auto& [kv, row_bytes, shown] : {std::tuple{"f16", 2 * d, std::string(" x 2 B)")},
                                             {"i8", d + 4, " x 2 x (" + std::to_string(d) + " + 4) x 1 B)"}}) {
    test::TempDir tmp;
    fs::path plan = write_plan(tmp, {{"backend", "cpu"},
                                     {"kind", "linear"},
                                     {"weights", (checkpoint_dir() / "model.safetensors").string()},
                                     {"tensor", "model.language_model.embed_tokens.weight"}});
    nlohmann::json j = read_json(plan);
    j["qhexrt_manifest"] = 5;
    j["graphs"]["llm"]["kv_cache"] = kv;
    std::ofstream(plan) << j.dump(1);
    const nlohmann::json m = doctor_json(plan.string(), 0)["manifest"];
    EXPECT_EQ(m["memory"]["kv_cache_bytes"], rows * row_bytes) << kv;
    const DoctorRun r = doctor(plan.string());
    EXPECT_TRUE(has(r.out, shown)) << kv << ": " << r.out;
  }
}

TEST(QhxDoctor, ABinaryForAnotherSocIsAProblemNamingBoth) {
  const fs::path dir = graphs_dir();
  test::TempDir tmp;
  const fs::path plan = write_plan(tmp, qnn_lm_head(dir / "lm_head_v75.bin", 69));
  const DoctorRun r = doctor(plan.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out,
                  "lm_head_v75.bin: the binary was prepared for SoC model 57 (SM8650, HTP v75), the plan "
                  "targets 69 (SM8750, HTP v79)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "1 problem(s)")) << r.out;
}

TEST(QhxDoctor, BinariesInPartsTakeTheNearestSocModel) {
  const fs::path dir = graphs_dir();
  test::TempDir tmp;
  nlohmann::json lm = qnn_lm_head(dir / "lm_head.bin", 69);
  lm["parts"] = {{{"context_binary", (dir / "lm_head.bin").string()}},
                 {{"context_binary", (dir / "lm_head_v75.bin").string()}, {"soc_model", 57}}};
  const auto ok = doctor_json(write_plan(tmp, lm, "ok.json").string(), 0);
  nlohmann::json bins;
  for (const auto& g : ok["manifest"]["graphs"])
    if (g["name"] == "lm_head") bins = g["binaries"];
  ASSERT_EQ(bins.size(), 3u) << bins;
  EXPECT_EQ(bins[1]["key"], "parts[0].context_binary");
  EXPECT_EQ(bins[2]["key"], "parts[1].context_binary");
  EXPECT_EQ(bins[2]["plan_soc_model"], 57);
  EXPECT_EQ(bins[2]["soc_model"], 57);
  lm["parts"][1]["soc_model"] = 69;
  const DoctorRun bad = doctor(write_plan(tmp, lm, "bad.json").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(has(bad.out, "parts[1].context_binary " + (dir / "lm_head_v75.bin").string())) << bad.out;
}

TEST(QhxDoctor, MissingLibrariesNameEveryPathTried) {
  const fs::path dir = graphs_dir();
  test::TempDir tmp;
  fs::create_directories(tmp.path() / "empty");
  const std::string env = "QHX_QNN_LIB_DIR=" + (tmp.path() / "empty").string();
  const std::string htp = (tmp.path() / "empty/libQnnHtp.so").string();
  const std::string sys = (tmp.path() / "empty/libQnnSystem.so").string();
  // The environment alone: QNN is optional, a warning.
  const DoctorRun env_only = doctor("", env);
  EXPECT_EQ(env_only.status, 0) << env_only.out;
  EXPECT_TRUE(has(env_only.out, htp)) << env_only.out;
  // A plan with a qnn-htp graph needs them.
  const fs::path plan = write_plan(tmp, qnn_lm_head(dir / "lm_head.bin"));
  const DoctorRun r = doctor(plan.string(), env);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "the plan has qnn-htp graphs, but the QAIRT libraries do not load")) << r.out;
  EXPECT_TRUE(has(r.out, htp)) << r.out;
  EXPECT_TRUE(has(r.out, sys)) << r.out;
  EXPECT_TRUE(has(r.out, "QHX_QNN_LIB_DIR")) << r.out;
  const auto j = doctor_json(plan.string(), 1, env);
  EXPECT_FALSE(j["qnn"]["loaded"].get<bool>());
  EXPECT_EQ(j["qnn"]["libraries"][0]["path"], "");
  EXPECT_TRUE(has(j["qnn"]["libraries"][0]["tried"][0], htp)) << j["qnn"];
  EXPECT_TRUE(has(j["qnn"]["libraries"][1]["tried"][0], sys)) << j["qnn"];
  // A CPU-only plan does not need them.
  const fs::path cpu_plan = write_plan(tmp,
                                       {{"backend", "cpu"},
                                        {"kind", "linear"},
                                        {"weights", (dir / "weights_dq.safetensors").string()},
                                        {"tensor", "lm_head"}},
                                       "cpu.json");
  EXPECT_EQ(doctor(cpu_plan.string(), env).status, 0);
}

TEST(QhxDoctor, AMissingBinaryIsNamed) {
  test::TempDir tmp;
  const fs::path missing = tmp.path() / "not_there.bin";
  const DoctorRun r = doctor(write_plan(tmp, qnn_lm_head(missing)).string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "graph \"lm_head\": context_binary " + missing.string() + ": the file is missing")) << r.out;
}

TEST(QhxDoctor, AnUnreadableManifestIsAProblem) {
  test::TempDir tmp;
  const DoctorRun r = doctor((tmp.path() / "absent.json").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "absent.json")) << r.out;
  EXPECT_EQ(doctor("--no-such-flag").status, 2);
}

TEST(QairtVersion, ANewerBinaryIsAProblemAnOlderOneAWarning) {
  using doctor::check_qairt_builds;
  const auto newer = check_qairt_builds("v2.51.0.260929181845", "v2.50.1.250101000000");
  EXPECT_TRUE(newer.problem);
  EXPECT_EQ(newer.message,
            "binary prepared with QAIRT 2.51.0.260929181845, libraries are 2.50.1.250101000000: install the QAIRT 2.51 "
            "runtime libraries or re-export with QAIRT 2.50");
  const auto older = check_qairt_builds("v2.50.1.1", "v2.51.0.2");
  EXPECT_FALSE(older.problem);
  EXPECT_TRUE(has(older.message, "re-export with QAIRT 2.51")) << older.message;
  const auto same = check_qairt_builds("v2.51.0.1", "v2.51.0.260929181845");
  EXPECT_FALSE(same.problem);
  EXPECT_TRUE(same.message.empty());
  EXPECT_FALSE(check_qairt_builds("?", "v2.51.0.1").message.empty());
  const auto wheel = doctor::parse_qairt_build("v2.51.0.260929181845");  // the pinned wheel's build id
  ASSERT_TRUE(wheel);
  EXPECT_EQ(wheel->major, 2);
  EXPECT_EQ(wheel->minor, 51);
  EXPECT_EQ(wheel->patch, 0);
  EXPECT_EQ(wheel->build, "260929181845");
  EXPECT_FALSE(doctor::parse_qairt_build("v2.51"));
  EXPECT_FALSE(doctor::parse_qairt_build("no version"));
  ASSERT_TRUE(doctor::parse_qairt_build("v3.0.12.42"));
  EXPECT_EQ(doctor::parse_qairt_build("v3.0.12.42")->patch, 12);
}

}  // namespace
}  // namespace qhx
