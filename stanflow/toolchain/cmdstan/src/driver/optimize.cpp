// method=optimize (L-BFGS, BFGS, Newton; with or without the Jacobian) and
// method=laplace (draws from the normal approximation at a given mode).
#include "driver.hpp"

#include <stan/io/ends_with.hpp>

#include <stan/callbacks/structured_writer.hpp>
#include <stan/services/optimize/bfgs.hpp>
#include <stan/services/optimize/laplace_sample.hpp>
#include <stan/services/optimize/lbfgs.hpp>
#include <stan/services/optimize/newton.hpp>

#include <sstream>

namespace stanflow {

namespace {

template <bool jacobian>
int optimize(run_context& ctx, const stan::io::var_context& init,
             double radius, stan::callbacks::writer& init_writer,
             csv_writer& output) {
  namespace opt = stan::services::optimize;
  using model_t = stan::model::model_base;
  const config& cfg = ctx.cfg;
  const std::string base = "method/optimize/";
  const std::string algorithm = cfg.list(base + "algorithm").chosen();
  int iter = cfg.integer(base + "iter");
  bool save = cfg.flag(base + "save_iterations");
  int refresh = cfg.integer("output/refresh");
  if (algorithm == "newton")
    return opt::newton<model_t, jacobian>(ctx.model, init, ctx.seed, ctx.id,
                                          radius, iter, save, ctx.interrupt,
                                          ctx.logger, init_writer, output);
  const std::string a = base + "algorithm/" + algorithm + "/";
  double init_alpha = cfg.real(a + "init_alpha");
  double tol_obj = cfg.real(a + "tol_obj");
  double tol_rel_obj = cfg.real(a + "tol_rel_obj");
  double tol_grad = cfg.real(a + "tol_grad");
  double tol_rel_grad = cfg.real(a + "tol_rel_grad");
  double tol_param = cfg.real(a + "tol_param");
  if (algorithm == "bfgs")
    return opt::bfgs<model_t, jacobian>(
        ctx.model, init, ctx.seed, ctx.id, radius, init_alpha, tol_obj,
        tol_rel_obj, tol_grad, tol_rel_grad, tol_param, iter, save, refresh,
        ctx.interrupt, ctx.logger, init_writer, output);
  return opt::lbfgs<model_t, jacobian>(
      ctx.model, init, ctx.seed, ctx.id, radius,
      cfg.integer(a + "history_size"), init_alpha, tol_obj, tol_rel_obj,
      tol_grad, tol_rel_grad, tol_param, iter, save, refresh, ctx.interrupt,
      ctx.logger, init_writer, output);
}

/** The mode on the unconstrained scale, from an optimize CSV or a JSON. */
Eigen::VectorXd read_mode(run_context& ctx, const std::string& path) {
  if (path.empty())
    throw std::invalid_argument(
        "laplace needs a mode: give mode=<optimize output CSV or JSON file>");
  std::stringstream msg;
  Eigen::VectorXd unconstrained;
  if (stan::io::ends_with(".csv", path)) {
    Eigen::MatrixXd draws = read_parameter_draws(ctx.model, path);
    if (draws.rows() == 0)
      throw std::invalid_argument("Mode file \"" + path + "\" has no rows");
    Eigen::VectorXd mode = draws.row(draws.rows() - 1).transpose();
    ctx.model.unconstrain_array(mode, unconstrained, &msg);
  } else {
    context_ptr values = read_var_context(path, ctx.logger);
    std::vector<int> params_i;
    std::vector<double> params_r;
    ctx.model.transform_inits(*values, params_i, params_r, &msg);
    unconstrained = Eigen::Map<Eigen::VectorXd>(params_r.data(),
                                                params_r.size());
  }
  if (!msg.str().empty())
    ctx.logger.info(msg);
  return unconstrained;
}

}  // namespace

int run_optimize(run_context& ctx) {
  init_spec init = parse_init(ctx.cfg.text("init"));
  context_ptr values = read_var_context(init.file, ctx.logger);
  stan::callbacks::writer init_writer;
  csv_writer output = open_csv(ctx, ctx.cfg.text("output/file"), ctx.id);
  if (ctx.cfg.flag("method/optimize/jacobian"))
    return optimize<true>(ctx, *values, init.radius, init_writer, output);
  return optimize<false>(ctx, *values, init.radius, init_writer, output);
}

int run_laplace(run_context& ctx) {
  const std::string base = "method/laplace/";
  Eigen::VectorXd mode = read_mode(ctx, ctx.cfg.text(base + "mode"));
  int draws = ctx.cfg.integer(base + "draws");
  bool calculate_lp = ctx.cfg.flag(base + "calculate_lp");
  int refresh = ctx.cfg.integer("output/refresh");
  csv_writer output = open_csv(ctx, ctx.cfg.text("output/file"), ctx.id);
  stan::callbacks::structured_writer no_hessian;
  if (ctx.cfg.flag(base + "jacobian"))
    return stan::services::laplace_sample<true>(
        ctx.model, mode, draws, calculate_lp, ctx.seed, refresh, ctx.interrupt,
        ctx.logger, output, no_hessian);
  return stan::services::laplace_sample<false>(
      ctx.model, mode, draws, calculate_lp, ctx.seed, refresh, ctx.interrupt,
      ctx.logger, output, no_hessian);
}

}  // namespace stanflow
