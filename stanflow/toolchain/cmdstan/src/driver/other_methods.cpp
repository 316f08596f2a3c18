// method=generate_quantities, method=log_prob and method=diagnose.
#include "driver.hpp"

#include <stan/io/json/json_data.hpp>
#include <stan/model/log_prob_grad.hpp>
#include <stan/services/diagnose/diagnose.hpp>
#include <stan/services/error_codes.hpp>
#include <stan/services/sample/standalone_gqs.hpp>

#include <sstream>

namespace stanflow {

int run_generate_quantities(run_context& ctx) {
  const std::string base = "method/generate_quantities/";
  const std::string fitted = ctx.cfg.text(base + "fitted_params");
  if (fitted.empty())
    throw std::invalid_argument(
        "generate_quantities needs fitted_params=<Stan CSV file of draws>");
  size_t num_chains = ctx.cfg.integer(base + "num_chains");
  const std::string output = ctx.cfg.text("output/file");
  std::vector<Eigen::MatrixXd> draws;
  std::vector<csv_writer> writers;
  for (size_t i = 0; i < num_chains; ++i) {
    unsigned int chain_id = ctx.id + i;
    bool several = num_chains > 1;
    draws.push_back(read_parameter_draws(
        ctx.model, several ? file_for_chain(fitted, chain_id) : fitted));
    writers.push_back(open_csv(
        ctx, several ? file_for_chain(output, chain_id) : output, chain_id));
  }
  return stan::services::standalone_generate(ctx.model, num_chains, draws,
                                             ctx.seed, ctx.interrupt,
                                             ctx.logger, writers);
}

namespace {

/** Parameter vectors on the unconstrained scale, one per row to evaluate. */
std::vector<std::vector<double>> log_prob_points(run_context& ctx) {
  const std::string base = "method/log_prob/";
  const std::string unconstrained = ctx.cfg.text(base + "unconstrained_params");
  const std::string constrained = ctx.cfg.text(base + "constrained_params");
  if (unconstrained.empty() == constrained.empty())
    throw std::invalid_argument(
        "log_prob needs exactly one of unconstrained_params=<file> or "
        "constrained_params=<file>");
  size_t dim = ctx.model.num_params_r();
  std::vector<std::vector<double>> points;
  if (!constrained.empty()) {
    context_ptr values = read_var_context(constrained, ctx.logger);
    std::vector<int> params_i;
    std::vector<double> params_r;
    std::stringstream msg;
    ctx.model.transform_inits(*values, params_i, params_r, &msg);
    points.push_back(params_r);
    return points;
  }
  context_ptr values = read_var_context(unconstrained, ctx.logger);
  if (!values->contains_r("params_r"))
    throw std::invalid_argument("unconstrained_params file \"" + unconstrained
                                + "\" has no variable params_r");
  std::vector<double> flat = values->vals_r("params_r");
  std::vector<size_t> dims = values->dims_r("params_r");
  size_t rows = dims.size() == 2 ? dims[0] : 1;
  size_t cols = dims.empty() ? 1 : dims.back();
  if (dims.size() > 2 || cols != dim)
    throw std::invalid_argument(
        "params_r in \"" + unconstrained + "\" must be a vector of length "
        + std::to_string(dim) + " or an array of such vectors");
  // var_context stores arrays column-major: element (r, c) is at c*rows + r.
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> point(cols);
    for (size_t c = 0; c < cols; ++c)
      point[c] = flat[c * rows + r];
    points.push_back(point);
  }
  return points;
}

}  // namespace

int run_log_prob(run_context& ctx) {
  bool jacobian = ctx.cfg.flag("method/log_prob/jacobian");
  std::vector<std::vector<double>> points = log_prob_points(ctx);
  csv_writer output = open_csv(ctx, ctx.cfg.text("output/file"), ctx.id);
  std::vector<std::string> names{"lp__"};
  std::vector<std::string> unconstrained;
  ctx.model.unconstrained_param_names(unconstrained, false, false);
  for (const auto& n : unconstrained)
    names.push_back("g_" + n);
  output(names);
  std::vector<int> params_i;
  for (auto& point : points) {
    std::vector<double> gradient;
    std::stringstream msg;
    double lp
        = jacobian
              ? stan::model::log_prob_grad<true, true>(ctx.model, point,
                                                       params_i, gradient, &msg)
              : stan::model::log_prob_grad<true, false>(
                  ctx.model, point, params_i, gradient, &msg);
    if (!msg.str().empty())
      ctx.logger.info(msg);
    std::vector<double> row{lp};
    row.insert(row.end(), gradient.begin(), gradient.end());
    output(row);
  }
  return stan::services::error_codes::OK;
}

int run_diagnose(run_context& ctx) {
  const std::string base = "method/diagnose/test/gradient/";
  init_spec init = parse_init(ctx.cfg.text("init"));
  context_ptr values = read_var_context(init.file, ctx.logger);
  stan::callbacks::writer init_writer;
  csv_writer output = open_csv(ctx, ctx.cfg.text("output/file"), ctx.id);
  return stan::services::diagnose::diagnose(
      ctx.model, *values, ctx.seed, ctx.id, init.radius,
      ctx.cfg.real(base + "epsilon"), ctx.cfg.real(base + "error"),
      ctx.interrupt, ctx.logger, init_writer, output);
}

}  // namespace stanflow
