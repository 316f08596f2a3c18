// The CmdStan 2.35 command line on top of stan::services: parses arguments,
// loads data, builds the model, runs the chosen method and moves its outputs
// into place only on success.
#include "driver.hpp"

#include <stan/callbacks/stream_logger.hpp>
#include <stan/math/prim/core/init_threadpool_tbb.hpp>
#include <stan/math/rev/core/profiling.hpp>
#include <stan/services/error_codes.hpp>
#include <stan/version.hpp>

#include <chrono>
#include <iostream>

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

void print_info() {
  std::cout << "stan_version_major = " << stan::MAJOR_VERSION << "\n"
            << "stan_version_minor = " << stan::MINOR_VERSION << "\n"
            << "stan_version_patch = " << stan::PATCH_VERSION << "\n"
            << "STAN_THREADS=" << (threaded ? "true" : "false") << "\n"
            << "STAN_MPI=false\n"
            << "STAN_OPENCL=false\n"
            << "STAN_NO_RANGE_CHECKS=false\n"
            << "STAN_CPP_OPTIMS=false\n";
}

void print_help(const std::string& program, const config& cfg, bool all) {
  std::cout << "Usage: " << program
            << " <arg1> <subarg1_1> ... <subarg1_m> ... <arg_n> <subarg_n_1> "
               "... <subarg_n_m>\n\n";
  if (all) {
    for (const auto& line : cfg.help_lines())
      std::cout << line << "\n";
  } else {
    std::cout << "Begin by selecting amongst the following inference methods "
                 "and diagnostics,\n"
              << "  method=sample|optimize|variational|diagnose|"
                 "generate_quantities|pathfinder|log_prob|laplace\n\n"
              << "Or see help information with\n"
              << "  help             Prints help\n"
              << "  help-all         Prints entire argument tree\n\n"
              << "Additional configuration available by specifying\n"
              << "  id, data, init, random, output, num_threads\n\n"
              << "See " << program << " <arg1> [ help | help-all ] "
              << "for details on individual arguments.\n";
  }
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

int run(int argc, const char* argv[]) {
  std::vector<std::string> tokens(argv + 1, argv + argc);
  config cfg(threaded);
  if (tokens.empty() || tokens[0] == "help" || tokens[0] == "help-all") {
    print_help(argv[0], cfg, !tokens.empty() && tokens[0] == "help-all");
    return tokens.empty() ? 1 : 0;
  }
  if (tokens.size() == 1 && tokens[0] == "info") {
    print_info();
    return 0;
  }
  try {
    cfg.parse(tokens);
  } catch (const argument_error& e) {
    std::cerr << e.what() << "\n"
              << "Failed to parse command arguments, cannot run model.\n";
    return 1;
  }
  value_argument& seed_arg = cfg.value("random/seed");
  unsigned int seed = seed_arg.as_int() < 0
                          ? clock_seed()
                          : static_cast<unsigned int>(seed_arg.as_int());
  seed_arg.force(std::to_string(seed));
  for (const auto& line : cfg.lines())
    std::cout << line << "\n";
  std::cout << std::endl;

  stan::math::init_threadpool_tbb(cfg.integer("num_threads"));
  stan::callbacks::stream_logger logger(std::cout, std::cout, std::cout,
                                        std::cerr, std::cerr);
  stan::callbacks::interrupt interrupt;
  output_files outputs;
  context_ptr data = read_var_context(cfg.text("data/file"), logger);
  stan::model::model_base& model = new_model(*data, seed, &std::cout);
  run_context ctx{cfg,       model,   seed,
                  static_cast<unsigned int>(cfg.integer("id")),
                  logger,    interrupt, outputs,
                  static_cast<int>(cfg.integer("output/sig_figs"))};
  int code = dispatch(ctx);
  if (code != stan::services::error_codes::OK)
    return 1;
  write_profile(ctx, cfg.text("output/profile_file"));
  if (cfg.flag("output/save_cmdstan_config"))
    write_config_json(ctx, with_suffix(cfg.text("output/file"), "_config.json"));
  outputs.commit();
  return 0;
}

}  // namespace
}  // namespace stanflow

int main(int argc, const char* argv[]) {
  try {
    return stanflow::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
}
