// The CmdStan 2.35 command line on top of stan::services: parses arguments,
// loads data, builds the model, runs the chosen method and moves its outputs
// into place only on success.
#include "driver.hpp"

#include <stan/callbacks/stream_logger.hpp>
#include <stan/math/prim/core/init_threadpool_tbb.hpp>
#include <stan/math/rev/core/profiling.hpp>
#include <stan/services/error_codes.hpp>
#include <stan/version.hpp>

#include <rapidjson/document.h>

#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>

// Defined by every model translation unit that stanc generates.
stan::model::model_base& new_model(stan::io::var_context& data_context,
                                   unsigned int seed, std::ostream* msg_stream);
stan::math::profile_map& get_stan_profile_data();

namespace stanflow {
namespace {

#ifdef STAN_THREADS
constexpr bool threaded = true;
#else
constexpr bool threaded = false;
#endif

void print_info(std::ostream& out) {
  out << "stan_version_major = " << stan::MAJOR_VERSION << "\n"
      << "stan_version_minor = " << stan::MINOR_VERSION << "\n"
      << "stan_version_patch = " << stan::PATCH_VERSION << "\n"
      << "STAN_THREADS=" << (threaded ? "true" : "false") << "\n"
      << "STAN_MPI=false\n"
      << "STAN_OPENCL=false\n"
      << "STAN_NO_RANGE_CHECKS=false\n"
      << "STAN_CPP_OPTIMS=false\n";
}

void print_help(std::ostream& out, const std::string& program,
                const config& cfg, bool all) {
  out << "Usage: " << program
      << " <arg1> <subarg1_1> ... <subarg1_m> ... <arg_n> <subarg_n_1> "
         "... <subarg_n_m>\n\n";
  if (all) {
    for (const auto& line : cfg.help_lines())
      out << line << "\n";
    return;
  }
  out << "Begin by selecting amongst the following inference methods and "
         "diagnostics,\n"
      << "  method=sample|optimize|variational|diagnose|"
         "generate_quantities|pathfinder|log_prob|laplace\n\n"
      << "Or see help information with\n"
      << "  help             Prints help\n"
      << "  help-all         Prints entire argument tree\n\n"
      << "Additional configuration available by specifying\n"
      << "  id, data, init, random, output, num_threads\n\n"
      << "stanflow's batch mode runs many command lines in one process:\n"
      << "  " << program << " batch JOBS.jsonl\n"
      << "with one {\"args\": [...], \"console\": \"path\"} object per line.\n";
}

/**
 * Keep freed memory in the process instead of returning it to the system.
 * glibc serves a block above its mmap threshold (128 KiB at first, then
 * adjusted) with a fresh mapping and trims the heap's top when much of it is
 * free, so an algorithm that allocates and frees the same large temporaries
 * in every iteration (ADVI's vectors of a model with tens of thousands of
 * parameters) can pay page faults on every iteration: about half the run time
 * of a fresh ADVI run on the Last.fm matrix factorisation
 * (bench/advi_malloc.py, docs/benchmarks.md). The
 * process is short-lived and its peak memory is what it needs anyway. Results
 * do not change. A user who tunes glibc's malloc (GLIBC_TUNABLES set) keeps
 * their settings.
 */
void keep_freed_memory() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr)
    return;
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's largest value
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

unsigned int clock_seed() {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<unsigned int>(ms);
}

void write_profile(run_context& ctx, const std::string& path) {
  const stan::math::profile_map& profiles = get_stan_profile_data();
  if (profiles.empty())
    return;
  auto stream = ctx.outputs.open(path);
  std::ofstream& out = *stream;
  out << "name,thread_id,total_time,forward_time,reverse_time,chain_stack,"
         "no_chain_stack,autodiff_calls,no_autodiff_calls\n";
  for (const auto& [key, info] : profiles) {
    out << key.first << "," << key.second << ","
        << info.get_fwd_time() + info.get_rev_time() << ","
        << info.get_fwd_time() << "," << info.get_rev_time() << ","
        << info.get_chain_stack_used() << "," << info.get_nochain_stack_used()
        << "," << info.get_num_AD_fwd_passes() << ","
        << info.get_num_no_AD_fwd_passes() << "\n";
  }
}

void write_config_json(run_context& ctx, const std::string& path) {
  auto out = ctx.outputs.open(path);
  *out << "{\"stan_version\": \"" << stan::MAJOR_VERSION << "."
       << stan::MINOR_VERSION << "." << stan::PATCH_VERSION
       << "\", \"model_name\": \"" << ctx.model.model_name()
       << "\", \"config\": " << ctx.cfg.json() << "}\n";
}

int dispatch(run_context& ctx) {
  const std::string& m = ctx.cfg.method();
  if (m == "sample")
    return run_sample(ctx);
  if (m == "optimize")
    return run_optimize(ctx);
  if (m == "variational")
    return run_variational(ctx);
  if (m == "pathfinder")
    return run_pathfinder(ctx);
  if (m == "laplace")
    return run_laplace(ctx);
  if (m == "generate_quantities")
    return run_generate_quantities(ctx);
  if (m == "log_prob")
    return run_log_prob(ctx);
  return run_diagnose(ctx);
}

/** One model run: the whole CmdStan command line, console to out/err. */
int run(const std::string& program, const std::vector<std::string>& tokens,
        std::ostream& out, std::ostream& err) {
  config cfg(threaded);
  if (tokens.empty() || tokens[0] == "help" || tokens[0] == "help-all") {
    print_help(out, program, cfg, !tokens.empty() && tokens[0] == "help-all");
    return tokens.empty() ? 1 : 0;
  }
  if (tokens.size() == 1 && tokens[0] == "info") {
    print_info(out);
    return 0;
  }
  try {
    cfg.parse(tokens);
  } catch (const argument_error& e) {
    err << e.what() << "\n"
        << "Failed to parse command arguments, cannot run model.\n";
    return 1;
  }
  value_argument& seed_arg = cfg.value("random/seed");
  unsigned int seed = seed_arg.as_int() < 0
                          ? clock_seed()
                          : static_cast<unsigned int>(seed_arg.as_int());
  seed_arg.force(std::to_string(seed));
  for (const auto& line : cfg.lines())
    out << line << "\n";
  out << std::endl;

  stan::math::init_threadpool_tbb(cfg.integer("num_threads"));
  stan::callbacks::stream_logger logger(out, out, out, err, err);
  stan::callbacks::interrupt interrupt;
  output_files outputs;
  context_ptr data = read_var_context(cfg.text("data/file"), logger);
  std::unique_ptr<stan::model::model_base> model(
      &new_model(*data, seed, &out));
  get_stan_profile_data().clear();
  run_context ctx{cfg,       *model,    seed,
                  static_cast<unsigned int>(cfg.integer("id")),
                  logger,    interrupt, outputs,
                  static_cast<int>(cfg.integer("output/sig_figs"))};
  int code = dispatch(ctx);
  // A failed gradient test is still a result: CmdStan keeps diagnose's file
  // and exits non-zero (cmdstanpy reads it with require_gradients_ok=False).
  const bool keep_output = cfg.method() == "diagnose";
  if (code != stan::services::error_codes::OK && !keep_output)
    return 1;
  write_profile(ctx, cfg.text("output/profile_file"));
  if (cfg.flag("output/save_cmdstan_config"))
    write_config_json(ctx, with_suffix(cfg.text("output/file"), "_config.json"));
  outputs.commit();
  return code == stan::services::error_codes::OK ? 0 : 1;
}

/** `run` with exceptions reported on `err` as a failure. */
int run_guarded(const std::string& program,
                const std::vector<std::string>& tokens, std::ostream& out,
                std::ostream& err) {
  try {
    return run(program, tokens, out, err);
  } catch (const std::exception& e) {
    err << e.what() << std::endl;
    return 1;
  }
}

/**
 * stanflow's batch mode, `<model> batch JOBS.jsonl`: many runs in one
 * process, so that short runs do not pay for a process start each. Every line
 * of JOBS is `{"args": [tokens...], "console": "path"}`; each job runs as if
 * its tokens had been the command line, with its console written to its
 * file, and `stanflow-batch: <line> <exit code>` is printed when it ends.
 * The TBB thread pool is set up by the first job, for all of them.
 */
int run_batch(const std::string& program, const std::string& jobs_path) {
  std::ifstream jobs(jobs_path);
  if (!jobs.is_open()) {
    std::cerr << "Can't open specified file, \"" << jobs_path << "\"\n";
    return 1;
  }
  std::string line;
  for (size_t index = 0; std::getline(jobs, line); ++index) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    rapidjson::Document job;
    job.Parse(line.c_str());
    if (job.HasParseError() || !job.IsObject() || !job.HasMember("args")
        || !job["args"].IsArray() || !job.HasMember("console")
        || !job["console"].IsString()) {
      std::cerr << jobs_path << ", line " << index + 1
                << ": expected {\"args\": [strings], \"console\": \"path\"}\n";
      return 1;
    }
    std::vector<std::string> tokens;
    for (const auto& token : job["args"].GetArray()) {
      if (!token.IsString()) {
        std::cerr << jobs_path << ", line " << index + 1
                  << ": every argument must be a string\n";
        return 1;
      }
      tokens.emplace_back(token.GetString());
    }
    std::ofstream console(job["console"].GetString());
    if (!console.is_open()) {
      std::cerr << "Cannot open console file \"" << job["console"].GetString()
                << "\"\n";
      return 1;
    }
    int code = run_guarded(program, tokens, console, console);
    console.close();
    std::cout << "stanflow-batch: " << index << " " << code << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace stanflow

int main(int argc, const char* argv[]) {
  stanflow::keep_freed_memory();
  std::vector<std::string> tokens(argv + 1, argv + argc);
  if (tokens.size() == 2 && tokens[0] == "batch")
    return stanflow::run_batch(argv[0], tokens[1]);
  return stanflow::run_guarded(argv[0], tokens, std::cout, std::cerr);
}
