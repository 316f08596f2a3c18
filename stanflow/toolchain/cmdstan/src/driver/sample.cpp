// method=sample: NUTS and static HMC with unit/diag/dense metrics, with or
// without adaptation, and the fixed_param sampler; several chains run in one
// process on TBB threads through the library's multi-chain services.
#include "driver.hpp"

#include <stan/callbacks/json_writer.hpp>
#include <stan/services/error_codes.hpp>
#include <stan/services/sample/fixed_param.hpp>
#include <stan/services/sample/hmc_nuts_dense_e.hpp>
#include <stan/services/sample/hmc_nuts_dense_e_adapt.hpp>
#include <stan/services/sample/hmc_nuts_diag_e.hpp>
#include <stan/services/sample/hmc_nuts_diag_e_adapt.hpp>
#include <stan/services/sample/hmc_nuts_unit_e.hpp>
#include <stan/services/sample/hmc_nuts_unit_e_adapt.hpp>
#include <stan/services/sample/hmc_static_dense_e.hpp>
#include <stan/services/sample/hmc_static_dense_e_adapt.hpp>
#include <stan/services/sample/hmc_static_diag_e.hpp>
#include <stan/services/sample/hmc_static_diag_e_adapt.hpp>
#include <stan/services/sample/hmc_static_unit_e.hpp>
#include <stan/services/sample/hmc_static_unit_e_adapt.hpp>
#include <stan/services/util/create_unit_e_dense_inv_metric.hpp>
#include <stan/services/util/create_unit_e_diag_inv_metric.hpp>

namespace stanflow {

namespace {

using metric_writer = stan::callbacks::json_writer<std::ofstream>;

/** Arguments shared by every HMC variant. */
struct hmc_settings {
  int num_warmup, num_samples, num_thin, refresh;
  bool save_warmup;
  double stepsize, stepsize_jitter;
  double delta, gamma, kappa, t0;
  unsigned int init_buffer, term_buffer, window;
};

/** Per-chain writers and inputs. */
struct chains {
  size_t n;
  double init_radius;
  std::vector<context_ptr> inits;
  std::vector<stan::callbacks::writer> init_writers;
  std::vector<csv_writer> samples;
  std::vector<csv_writer> diagnostics;
  std::vector<metric_writer> metrics;
};

std::vector<context_ptr> inverse_metrics(run_context& ctx, const chains& ch,
                                         const std::string& metric,
                                         const std::string& metric_file) {
  if (!metric_file.empty())
    return read_chain_contexts(metric_file, ch.n, ctx.id, ctx.logger);
  size_t dim = ctx.model.num_params_r();
  std::vector<context_ptr> out;
  for (size_t i = 0; i < ch.n; ++i) {
    auto unit = metric == "dense_e"
                    ? stan::services::util::create_unit_e_dense_inv_metric(dim)
                    : stan::services::util::create_unit_e_diag_inv_metric(dim);
    out.push_back(std::make_shared<stan::io::array_var_context>(unit));
  }
  return out;
}

int run_nuts(run_context& ctx, chains& ch, const hmc_settings& s,
             const std::string& metric, const std::string& metric_file,
             bool adapt) {
  namespace smp = stan::services::sample;
  auto& m = ctx.model;
  int depth = ctx.cfg.integer("method/sample/algorithm/hmc/engine/nuts/max_depth");
  if (metric == "unit_e") {
    if (adapt)
      return smp::hmc_nuts_unit_e_adapt(
          m, ch.n, ch.inits, ctx.seed, ctx.id, ch.init_radius, s.num_warmup,
          s.num_samples, s.num_thin, s.save_warmup, s.refresh, s.stepsize,
          s.stepsize_jitter, depth, s.delta, s.gamma, s.kappa, s.t0,
          ctx.interrupt, ctx.logger, ch.init_writers, ch.samples,
          ch.diagnostics, ch.metrics);
    return smp::hmc_nuts_unit_e(m, ch.n, ch.inits, ctx.seed, ctx.id,
                                ch.init_radius, s.num_warmup, s.num_samples,
                                s.num_thin, s.save_warmup, s.refresh,
                                s.stepsize, s.stepsize_jitter, depth,
                                ctx.interrupt, ctx.logger, ch.init_writers,
                                ch.samples, ch.diagnostics);
  }
  auto inv = inverse_metrics(ctx, ch, metric, metric_file);
  if (metric == "diag_e") {
    if (adapt)
      return smp::hmc_nuts_diag_e_adapt(
          m, ch.n, ch.inits, inv, ctx.seed, ctx.id, ch.init_radius,
          s.num_warmup, s.num_samples, s.num_thin, s.save_warmup, s.refresh,
          s.stepsize, s.stepsize_jitter, depth, s.delta, s.gamma, s.kappa,
          s.t0, s.init_buffer, s.term_buffer, s.window, ctx.interrupt,
          ctx.logger, ch.init_writers, ch.samples, ch.diagnostics, ch.metrics);
    return smp::hmc_nuts_diag_e(m, ch.n, ch.inits, inv, ctx.seed, ctx.id,
                                ch.init_radius, s.num_warmup, s.num_samples,
                                s.num_thin, s.save_warmup, s.refresh,
                                s.stepsize, s.stepsize_jitter, depth,
                                ctx.interrupt, ctx.logger, ch.init_writers,
                                ch.samples, ch.diagnostics);
  }
  if (adapt)
    return smp::hmc_nuts_dense_e_adapt(
        m, ch.n, ch.inits, inv, ctx.seed, ctx.id, ch.init_radius, s.num_warmup,
        s.num_samples, s.num_thin, s.save_warmup, s.refresh, s.stepsize,
        s.stepsize_jitter, depth, s.delta, s.gamma, s.kappa, s.t0,
        s.init_buffer, s.term_buffer, s.window, ctx.interrupt, ctx.logger,
        ch.init_writers, ch.samples, ch.diagnostics, ch.metrics);
  return smp::hmc_nuts_dense_e(m, ch.n, ch.inits, inv, ctx.seed, ctx.id,
                               ch.init_radius, s.num_warmup, s.num_samples,
                               s.num_thin, s.save_warmup, s.refresh,
                               s.stepsize, s.stepsize_jitter, depth,
                               ctx.interrupt, ctx.logger, ch.init_writers,
                               ch.samples, ch.diagnostics);
}

int run_static(run_context& ctx, chains& ch, const hmc_settings& s,
               const std::string& metric, const std::string& metric_file,
               bool adapt) {
  namespace smp = stan::services::sample;
  auto& m = ctx.model;
  double t = ctx.cfg.real("method/sample/algorithm/hmc/engine/static/int_time");
  auto& init = *ch.inits[0];
  auto& iw = ch.init_writers[0];
  auto& sw = ch.samples[0];
  auto& dw = ch.diagnostics[0];
  if (metric == "unit_e") {
    if (adapt)
      return smp::hmc_static_unit_e_adapt(
          m, init, ctx.seed, ctx.id, ch.init_radius, s.num_warmup,
          s.num_samples, s.num_thin, s.save_warmup, s.refresh, s.stepsize,
          s.stepsize_jitter, t, s.delta, s.gamma, s.kappa, s.t0,
          ctx.interrupt, ctx.logger, iw, sw, dw);
    return smp::hmc_static_unit_e(m, init, ctx.seed, ctx.id, ch.init_radius,
                                  s.num_warmup, s.num_samples, s.num_thin,
                                  s.save_warmup, s.refresh, s.stepsize,
                                  s.stepsize_jitter, t, ctx.interrupt,
                                  ctx.logger, iw, sw, dw);
  }
  auto inv = inverse_metrics(ctx, ch, metric, metric_file);
  if (metric == "diag_e") {
    if (adapt)
      return smp::hmc_static_diag_e_adapt(
          m, init, *inv[0], ctx.seed, ctx.id, ch.init_radius, s.num_warmup,
          s.num_samples, s.num_thin, s.save_warmup, s.refresh, s.stepsize,
          s.stepsize_jitter, t, s.delta, s.gamma, s.kappa, s.t0,
          s.init_buffer, s.term_buffer, s.window, ctx.interrupt, ctx.logger,
          iw, sw, dw);
    return smp::hmc_static_diag_e(m, init, *inv[0], ctx.seed, ctx.id,
                                  ch.init_radius, s.num_warmup, s.num_samples,
                                  s.num_thin, s.save_warmup, s.refresh,
                                  s.stepsize, s.stepsize_jitter, t,
                                  ctx.interrupt, ctx.logger, iw, sw, dw);
  }
  if (adapt)
    return smp::hmc_static_dense_e_adapt(
        m, init, *inv[0], ctx.seed, ctx.id, ch.init_radius, s.num_warmup,
        s.num_samples, s.num_thin, s.save_warmup, s.refresh, s.stepsize,
        s.stepsize_jitter, t, s.delta, s.gamma, s.kappa, s.t0, s.init_buffer,
        s.term_buffer, s.window, ctx.interrupt, ctx.logger, iw, sw, dw);
  return smp::hmc_static_dense_e(m, init, *inv[0], ctx.seed, ctx.id,
                                 ch.init_radius, s.num_warmup, s.num_samples,
                                 s.num_thin, s.save_warmup, s.refresh,
                                 s.stepsize, s.stepsize_jitter, t,
                                 ctx.interrupt, ctx.logger, iw, sw, dw);
}

}  // namespace

int run_sample(run_context& ctx) {
  config& cfg = ctx.cfg;
  const std::string base = "method/sample/";
  auto& algorithm = cfg.list(base + "algorithm");
  if (algorithm.chosen() != "fixed_param" && ctx.model.num_params_r() == 0) {
    ctx.logger.info(
        "Model contains no parameters, running fixed_param sampler, no "
        "updates to Markov chain");
    algorithm.choose("fixed_param");
  }
  bool fixed_param = algorithm.chosen() == "fixed_param";
  size_t num_chains = cfg.integer(base + "num_chains");
  hmc_settings s{};
  s.num_warmup = cfg.integer(base + "num_warmup");
  s.num_samples = cfg.integer(base + "num_samples");
  s.num_thin = cfg.integer(base + "thin");
  s.save_warmup = cfg.flag(base + "save_warmup");
  s.refresh = cfg.integer("output/refresh");
  bool adapt = cfg.flag(base + "adapt/engaged");
  std::string engine, metric, metric_file;
  if (!fixed_param) {
    const std::string hmc = base + "algorithm/hmc/";
    engine = cfg.list(hmc + "engine").chosen();
    metric = cfg.list(hmc + "metric").chosen();
    metric_file = cfg.text(hmc + "metric_file");
    s.stepsize = cfg.real(hmc + "stepsize");
    s.stepsize_jitter = cfg.real(hmc + "stepsize_jitter");
    s.delta = cfg.real(base + "adapt/delta");
    s.gamma = cfg.real(base + "adapt/gamma");
    s.kappa = cfg.real(base + "adapt/kappa");
    s.t0 = cfg.real(base + "adapt/t0");
    s.init_buffer = cfg.integer(base + "adapt/init_buffer");
    s.term_buffer = cfg.integer(base + "adapt/term_buffer");
    s.window = cfg.integer(base + "adapt/window");
    if (adapt && s.num_warmup == 0)
      throw std::invalid_argument(
          "The number of warmup samples (num_warmup) must be greater than "
          "zero if adaptation is enabled.");
    if (engine == "static" && num_chains > 1)
      throw std::invalid_argument(
          "num_chains > 1 is only supported for the NUTS engine; run static "
          "HMC chains as separate processes.");
    if (metric == "unit_e" && !metric_file.empty())
      ctx.logger.warn("metric_file is ignored for the unit_e metric.");
  }

  chains ch;
  ch.n = num_chains;
  init_spec init = parse_init(cfg.text("init"));
  ch.init_radius = init.radius;
  ch.inits = read_chain_contexts(init.file, num_chains, ctx.id, ctx.logger);
  ch.init_writers.resize(num_chains);
  const std::string output = cfg.text("output/file");
  const std::string diagnostic = cfg.text("output/diagnostic_file");
  bool save_metric = !fixed_param && adapt && cfg.flag(base + "adapt/save_metric");
  for (size_t i = 0; i < num_chains; ++i) {
    unsigned int chain_id = ctx.id + i;
    auto name = [&](const std::string& p) {
      return num_chains > 1 ? file_for_chain(p, chain_id) : p;
    };
    ch.samples.push_back(open_csv(ctx, name(output), chain_id));
    ch.diagnostics.push_back(diagnostic.empty()
                                 ? null_csv()
                                 : open_csv(ctx, name(diagnostic), chain_id));
    ch.metrics.push_back(
        save_metric ? metric_writer(ctx.outputs.open(
            with_suffix(name(output), "_metric.json")))
                    : metric_writer());
  }

  if (fixed_param)
    return stan::services::sample::fixed_param(
        ctx.model, num_chains, ch.inits, ctx.seed, ctx.id, ch.init_radius,
        s.num_samples, s.num_thin, s.refresh, ctx.interrupt, ctx.logger,
        ch.init_writers, ch.samples, ch.diagnostics);
  if (engine == "nuts")
    return run_nuts(ctx, ch, s, metric, metric_file, adapt);
  return run_static(ctx, ch, s, metric, metric_file, adapt);
}

}  // namespace stanflow
