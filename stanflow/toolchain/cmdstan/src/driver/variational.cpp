// method=variational: ADVI, mean-field or full-rank.
#include "driver.hpp"

#include <stan/services/experimental/advi/fullrank.hpp>
#include <stan/services/experimental/advi/meanfield.hpp>

namespace stanflow {

int run_variational(run_context& ctx) {
  const config& cfg = ctx.cfg;
  const std::string base = "method/variational/";
  init_spec init = parse_init(cfg.text("init"));
  context_ptr values = read_var_context(init.file, ctx.logger);
  int grad_samples = cfg.integer(base + "grad_samples");
  int elbo_samples = cfg.integer(base + "elbo_samples");
  int iter = cfg.integer(base + "iter");
  double tol_rel_obj = cfg.real(base + "tol_rel_obj");
  double eta = cfg.real(base + "eta");
  bool adapt = cfg.flag(base + "adapt/engaged");
  int adapt_iter = cfg.integer(base + "adapt/iter");
  int eval_elbo = cfg.integer(base + "eval_elbo");
  int output_samples = cfg.integer(base + "output_samples");
  stan::callbacks::writer init_writer;
  csv_writer output = open_csv(ctx, cfg.text("output/file"), ctx.id);
  const std::string diagnostic = cfg.text("output/diagnostic_file");
  csv_writer diagnostics
      = diagnostic.empty() ? null_csv() : open_csv(ctx, diagnostic, ctx.id);
  namespace advi = stan::services::experimental::advi;
  if (cfg.list(base + "algorithm").chosen() == "fullrank")
    return advi::fullrank(ctx.model, *values, ctx.seed, ctx.id, init.radius,
                          grad_samples, elbo_samples, iter, tol_rel_obj, eta,
                          adapt, adapt_iter, eval_elbo, output_samples,
                          ctx.interrupt, ctx.logger, init_writer, output,
                          diagnostics);
  return advi::meanfield(ctx.model, *values, ctx.seed, ctx.id, init.radius,
                         grad_samples, elbo_samples, iter, tol_rel_obj, eta,
                         adapt, adapt_iter, eval_elbo, output_samples,
                         ctx.interrupt, ctx.logger, init_writer, output,
                         diagnostics);
}

}  // namespace stanflow
