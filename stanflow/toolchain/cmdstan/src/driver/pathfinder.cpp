// method=pathfinder: one path, or several combined by PSIS.
#include "driver.hpp"

#include <stan/callbacks/json_writer.hpp>
#include <stan/services/pathfinder/multi.hpp>
#include <stan/services/pathfinder/single.hpp>

namespace stanflow {

namespace {
using json_file_writer = stan::callbacks::json_writer<std::ofstream>;
}  // namespace

int run_pathfinder(run_context& ctx) {
  const config& cfg = ctx.cfg;
  const std::string b = "method/pathfinder/";
  int history_size = cfg.integer(b + "history_size");
  double init_alpha = cfg.real(b + "init_alpha");
  double tol_obj = cfg.real(b + "tol_obj");
  double tol_rel_obj = cfg.real(b + "tol_rel_obj");
  double tol_grad = cfg.real(b + "tol_grad");
  double tol_rel_grad = cfg.real(b + "tol_rel_grad");
  double tol_param = cfg.real(b + "tol_param");
  int max_iters = cfg.integer(b + "max_lbfgs_iters");
  int num_elbo_draws = cfg.integer(b + "num_elbo_draws");
  int num_draws = cfg.integer(b + "num_draws");
  int num_psis_draws = cfg.integer(b + "num_psis_draws");
  size_t num_paths = cfg.integer(b + "num_paths");
  bool save_paths = cfg.flag(b + "save_single_paths");
  bool psis_resample = cfg.flag(b + "psis_resample");
  bool calculate_lp = cfg.flag(b + "calculate_lp");
  int refresh = cfg.integer("output/refresh");
  const std::string output_file = cfg.text("output/file");
  init_spec init = parse_init(cfg.text("init"));
  std::vector<context_ptr> inits
      = read_chain_contexts(init.file, num_paths, ctx.id, ctx.logger);
  namespace pf = stan::services::pathfinder;

  if (num_paths == 1) {
    stan::callbacks::writer init_writer;
    csv_writer output = open_csv(ctx, output_file, ctx.id);
    json_file_writer diagnostics
        = save_paths ? json_file_writer(ctx.outputs.open(
              with_suffix(output_file, ".json")))
                     : json_file_writer();
    return pf::pathfinder_lbfgs_single<false>(
        ctx.model, *inits[0], ctx.seed, ctx.id, init.radius, history_size,
        init_alpha, tol_obj, tol_rel_obj, tol_grad, tol_rel_grad, tol_param,
        max_iters, num_elbo_draws, num_draws, save_paths, refresh,
        ctx.interrupt, ctx.logger, init_writer, output, diagnostics,
        calculate_lp);
  }
  std::vector<stan::callbacks::writer> init_writers(num_paths);
  std::vector<csv_writer> path_outputs;
  std::vector<json_file_writer> path_diagnostics;
  for (size_t i = 0; i < num_paths; ++i) {
    unsigned int path_id = ctx.id + i;
    if (save_paths) {
      std::string stem = with_suffix(output_file, "_path_" + std::to_string(path_id));
      path_outputs.push_back(open_csv(ctx, stem + ".csv", path_id));
      path_diagnostics.emplace_back(ctx.outputs.open(stem + ".json"));
    } else {
      path_outputs.push_back(null_csv());
      path_diagnostics.emplace_back();
    }
  }
  csv_writer output = open_csv(ctx, output_file, ctx.id);
  json_file_writer no_diagnostics;
  return pf::pathfinder_lbfgs_multi(
      ctx.model, inits, ctx.seed, ctx.id, init.radius, history_size,
      init_alpha, tol_obj, tol_rel_obj, tol_grad, tol_rel_grad, tol_param,
      max_iters, num_elbo_draws, num_draws, num_psis_draws, num_paths,
      save_paths, refresh, ctx.interrupt, ctx.logger, init_writers,
      path_outputs, path_diagnostics, output, no_diagnostics, calculate_lp,
      psis_resample);
}

}  // namespace stanflow
