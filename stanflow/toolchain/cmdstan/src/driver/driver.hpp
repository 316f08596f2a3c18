// Shared pieces of the CmdStan-compatible driver: the run context handed to
// each method, input contexts, output files and CSV headers.
#ifndef STANFLOW_DRIVER_DRIVER_HPP
#define STANFLOW_DRIVER_DRIVER_HPP

#include "config.hpp"

#include <stan/callbacks/interrupt.hpp>
#include <stan/callbacks/logger.hpp>
#include <stan/callbacks/unique_stream_writer.hpp>
#include <stan/callbacks/writer.hpp>
#include <stan/io/var_context.hpp>
#include <stan/model/model_base.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace stanflow {

using csv_writer = stan::callbacks::unique_stream_writer<std::ofstream>;
using context_ptr = std::shared_ptr<stan::io::var_context>;

/**
 * Output files written under temporary names and renamed into place only
 * when the run succeeds, so a failed run leaves nothing that looks like a
 * result.
 */
class output_files {
 public:
  output_files() = default;
  output_files(const output_files&) = delete;
  ~output_files();
  /** Open `path` for writing (really a temporary beside it). */
  std::unique_ptr<std::ofstream> open(const std::string& path);
  /** Rename every opened file to its final name. */
  void commit();

 private:
  std::vector<std::string> paths_;
  bool committed_ = false;
};

/** Everything a method needs to run. */
struct run_context {
  config& cfg;
  stan::model::model_base& model;
  unsigned int seed;
  unsigned int id;
  stan::callbacks::logger& logger;
  stan::callbacks::interrupt& interrupt;
  output_files& outputs;
  int sig_figs;
};

/** `out.csv` -> `out_3.csv`: insert `_<id>` before the extension. */
std::string file_for_chain(const std::string& path, unsigned int id);

/** `out.csv` -> `out<suffix>`: replace the extension. */
std::string with_suffix(const std::string& path, const std::string& suffix);

/** A data/init/metric file as a var_context; "" gives an empty context. */
context_ptr read_var_context(const std::string& path,
                             stan::callbacks::logger& logger);

/**
 * One var_context per chain: `X_<id+i>.ext` where it exists, else `X.ext`
 * for every chain.
 */
std::vector<context_ptr> read_chain_contexts(const std::string& path,
                                             size_t num_chains,
                                             unsigned int id,
                                             stan::callbacks::logger& logger);

/** The `init` argument as (radius, file): a number is a radius. */
struct init_spec {
  double radius;
  std::string file;
};
init_spec parse_init(const std::string& init);

/**
 * Open a CSV writer on `path` (as a temporary) and write the header, with
 * `chain_id` as the `id` it records.
 */
csv_writer open_csv(run_context& ctx, const std::string& path,
                    unsigned int chain_id);

/** Open a writer that discards everything (an unset diagnostic file). */
csv_writer null_csv();

/** Write the CmdStan header comments (version, model, config, stanc). */
void write_header(run_context& ctx, stan::callbacks::writer& writer,
                  unsigned int chain_id);

/** The constrained parameter values of a Stan CSV's draws, one row each. */
Eigen::MatrixXd read_parameter_draws(const stan::model::model_base& model,
                                     const std::string& csv_path);

int run_sample(run_context& ctx);
int run_optimize(run_context& ctx);
int run_laplace(run_context& ctx);
int run_variational(run_context& ctx);
int run_pathfinder(run_context& ctx);
int run_generate_quantities(run_context& ctx);
int run_log_prob(run_context& ctx);
int run_diagnose(run_context& ctx);

}  // namespace stanflow
#endif
