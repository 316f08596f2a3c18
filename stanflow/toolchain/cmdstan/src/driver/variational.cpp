// method=variational: ADVI, mean-field or full-rank.
//
// Without the checkpoint extension this is stan::services' ADVI. With
// `checkpoint save=FILE` and/or `checkpoint load=FILE` the driver runs the
// same algorithm through its own loop (the step-size sequence of Kucukelbir
// et al. 2017, as Stan implements it) so that the state can be saved after
// the last iteration and a later run can continue from it: a run of n
// iterations continued for m more consumes the same random numbers and ends
// in the same state as one run of n + m iterations (as long as neither stops
// early on tol_rel_obj: the stopping rule's window of relative ELBO changes
// starts afresh with each run, sized by its own iter), and a run with `save`
// alone writes the same draws as a run without it.
#include "advi_state.hpp"
#include "driver.hpp"

#include <stan/services/error_codes.hpp>
#include <stan/services/experimental/advi/fullrank.hpp>
#include <stan/services/experimental/advi/meanfield.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/services/util/initialize.hpp>
#include <stan/variational/advi.hpp>

#include <boost/circular_buffer.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <numeric>
#include <sstream>

namespace stanflow {

namespace {

namespace variational = stan::variational;
using model_t = stan::model::model_base;

/** The ADVI settings read from the command line. */
struct advi_settings {
  std::string algorithm;
  int grad_samples, elbo_samples, iter, adapt_iter, eval_elbo, output_samples;
  double tol_rel_obj, eta;
  bool adapt;
  std::string load, save;
};

Eigen::MatrixXd scale_of(const variational::normal_meanfield& q) {
  return q.omega();
}
Eigen::MatrixXd scale_of(const variational::normal_fullrank& q) {
  return q.L_chol();
}
void make_family(const Eigen::VectorXd& mu, const Eigen::MatrixXd& scale,
                 variational::normal_meanfield& q) {
  q = variational::normal_meanfield(mu, Eigen::VectorXd(scale.col(0)));
}
void make_family(const Eigen::VectorXd& mu, const Eigen::MatrixXd& scale,
                 variational::normal_fullrank& q) {
  q = variational::normal_fullrank(mu, scale);
}

/**
 * The RNG's state as text that its stream operator reads back. Boost's
 * reader refuses a mixmax state whose counter is at the end of its vector
 * (the writer writes such states); that state is the same stream as the
 * next vector with the counter at its start, which is written instead.
 * Checked: the text read back must give the same next draws.
 */
std::string rng_text(const stan::rng_t& rng) {
  std::ostringstream out;
  out << rng;
  std::string text = out.str();
  std::istringstream fields(text);
  long long size = 0, counter = 0;
  fields >> size >> counter;
  if (counter == size) {
    // from the same vector with the counter one before its end: two draws
    // reach the next vector with the counter past its first entry
    std::string rest;
    std::getline(fields, rest);
    stan::rng_t next;
    std::istringstream(std::to_string(size) + " " + std::to_string(size - 1)
                       + rest)
        >> next;
    next();
    next();
    std::ostringstream again;
    again << next;
    std::istringstream moved(again.str());
    moved >> size >> counter;
    std::getline(moved, rest);
    text = std::to_string(size) + " 1" + rest + "\n";
  }
  stan::rng_t copy = rng, restored;
  std::istringstream(text) >> restored;
  for (int i = 0; i < 2 * size; ++i)
    if (copy() != restored())
      throw std::logic_error("cannot save the state of the RNG");
  return text;
}

double median(const boost::circular_buffer<double>& buffer) {
  std::vector<double> v(buffer.begin(), buffer.end());
  auto middle = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), middle, v.end());
  return *middle;
}

/**
 * ADVI with a state that can be saved and loaded. The loop is Stan's
 * (stan::variational::advi::stochastic_gradient_ascent): the same gradient
 * and ELBO estimators (called through advi's public members, so the same
 * random numbers), the same step sizes eta / sqrt(k) / (1 + sqrt(s_k)) with
 * s_1 = g_1^2 and s_k = 0.9 s_{k-1} + 0.1 g_k^2, ELBO evaluations at
 * multiples of eval_elbo of the global iteration k, and the same stopping
 * rule on the mean and median relative ELBO change (within one run).
 */
template <class Q>
class resumable_advi {
 public:
  resumable_advi(run_context& ctx, const advi_settings& s)
      : ctx_(ctx), s_(s), rng_(stan::services::util::create_rng(ctx.seed, ctx.id)) {}

  int run(csv_writer& output, csv_writer& diagnostics) {
    std::vector<std::string> names{"lp__", "log_p__", "log_g__"};
    ctx_.model.constrained_param_names(names, true, true);
    Eigen::VectorXd cont_params;
    Q q(ctx_.model.num_params_r());
    Q history(ctx_.model.num_params_r());
    long long k = 0;
    double eta = s_.eta;
    std::optional<double> elbo;
    if (!s_.load.empty()) {
      advi_state state = load_state();
      cont_params = state.mu;
      make_family(state.mu, state.scale, q);
      make_family(state.history_mu, state.history_scale, history);
      k = state.iteration;
      eta = state.eta;
      elbo = state.elbo;
      std::stringstream msg;
      msg << "Continuing ADVI from " << s_.load << " after iteration " << k
          << " (eta = " << eta << ")";
      ctx_.logger.info(msg);
    } else {
      stan::callbacks::writer init_writer;
      init_spec init = parse_init(ctx_.cfg.text("init"));
      context_ptr values = read_var_context(init.file, ctx_.logger);
      std::vector<double> start;
      try {
        start = stan::services::util::initialize(ctx_.model, *values, rng_,
                                                 init.radius, true, ctx_.logger,
                                                 init_writer);
      } catch (const std::exception& e) {
        ctx_.logger.error(e.what());
        return stan::services::error_codes::CONFIG;
      }
      cont_params = Eigen::Map<Eigen::VectorXd>(start.data(), start.size());
      q = Q(cont_params);
    }
    output(names);
    variational::advi<model_t, Q, stan::rng_t> advi(
        ctx_.model, cont_params, rng_, s_.grad_samples, s_.elbo_samples,
        s_.eval_elbo, s_.output_samples);
    diagnostics("iter,time_in_seconds,ELBO");
    try {
      if (s_.load.empty() && s_.adapt)
        eta = advi.adapt_eta(q, s_.adapt_iter, ctx_.logger);
      // Always written, so that every CSV of a resumable run reads the same
      // (cmdstanpy needs this block to parse a variational CSV).
      output("Stepsize adaptation complete.");
      std::stringstream line;
      line << "eta = " << eta;
      output(line.str());
      iterate(advi, q, history, k, eta, elbo, diagnostics);
    } catch (const std::exception& e) {
      ctx_.logger.error(e.what());
      return stan::services::error_codes::SOFTWARE;
    }
    if (!s_.save.empty())
      save_state(q, history, k, eta, elbo);
    write_draws(q, cont_params, output);
    return stan::services::error_codes::OK;
  }

 private:
  advi_state load_state() {
    advi_state state = read_advi_state(s_.load);
    auto fail = [&](const std::string& what) {
      throw std::invalid_argument("checkpoint load: \"" + s_.load + "\" " + what);
    };
    if (state.algorithm != s_.algorithm)
      fail("was written by algorithm=" + state.algorithm + ", not "
           + s_.algorithm);
    if (state.model != ctx_.model.model_name())
      fail("was written by model " + state.model + ", not "
           + ctx_.model.model_name());
    if (state.mu.size() != static_cast<Eigen::Index>(ctx_.model.num_params_r()))
      fail("has " + std::to_string(state.mu.size())
           + " unconstrained parameters, the model has "
           + std::to_string(ctx_.model.num_params_r()));
    std::istringstream rng(state.rng);
    long long size = 0;
    std::istringstream(state.rng) >> size;
    if (size != 17)  // mixmax's vector length; boost only asserts it
      fail("field rng is not a state of Stan's RNG");
    rng >> rng_;
    if (rng.fail())
      fail("field rng is not a state of Stan's RNG");
    return state;
  }

  void save_state(const Q& q, const Q& history, long long k, double eta,
                  const std::optional<double>& elbo) {
    advi_state state;
    state.algorithm = s_.algorithm;
    state.model = ctx_.model.model_name();
    state.iteration = k;
    state.eta = eta;
    state.elbo = elbo;
    state.mu = q.mean();
    state.scale = scale_of(q);
    state.history_mu = history.mean();
    state.history_scale = scale_of(history);
    state.rng = rng_text(rng_);
    write_advi_state(*ctx_.outputs.open(s_.save), state);
  }

  void iterate(variational::advi<model_t, Q, stan::rng_t>& advi, Q& q,
               Q& history, long long& k, double eta,
               std::optional<double>& elbo, csv_writer& diagnostics) {
    const double tau = 1.0, pre_factor = 0.9, post_factor = 0.1;
    Q gradient(ctx_.model.num_params_r());
    // Stan's first relative change is |(0 - elbo) / elbo| = 1.
    double elbo_now = elbo.value_or(0.0);
    int buffer_size = static_cast<int>(
        std::max(0.1 * s_.iter / s_.eval_elbo, 2.0));
    boost::circular_buffer<double> changes(buffer_size);
    ctx_.logger.info("Begin stochastic gradient ascent.");
    ctx_.logger.info(
        "  iter             ELBO   delta_ELBO_mean   delta_ELBO_med   notes ");
    auto start = std::chrono::steady_clock::now();
    for (int i = 1; i <= s_.iter; ++i) {
      ++k;
      advi.calc_ELBO_grad(q, gradient, ctx_.logger);
      if (k == 1)
        history += gradient.square();
      else
        history = pre_factor * history + post_factor * gradient.square();
      double eta_scaled = eta / std::sqrt(static_cast<double>(k));
      q += eta_scaled * gradient / (tau + history.sqrt());
      if (k % s_.eval_elbo != 0)
        continue;
      double elbo_prev = elbo_now;
      elbo_now = advi.calc_ELBO(q, ctx_.logger);
      elbo = elbo_now;
      changes.push_back(std::fabs((elbo_prev - elbo_now) / elbo_now));
      double mean = std::accumulate(changes.begin(), changes.end(), 0.0)
                    / static_cast<double>(changes.size());
      double med = median(changes);
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      diagnostics(std::vector<double>{static_cast<double>(k), seconds, elbo_now});
      std::stringstream msg;
      msg << "  " << std::setw(4) << k << "  " << std::setw(15) << std::fixed
          << std::setprecision(3) << elbo_now << "  " << std::setw(16) << mean
          << "  " << std::setw(15) << med;
      bool converged = mean < s_.tol_rel_obj || med < s_.tol_rel_obj;
      if (mean < s_.tol_rel_obj)
        msg << "   MEAN ELBO CONVERGED";
      if (med < s_.tol_rel_obj)
        msg << "   MEDIAN ELBO CONVERGED";
      ctx_.logger.info(msg);
      if (converged)
        return;
    }
    ctx_.logger.info(
        "Informational Message: The maximum number of iterations is reached! "
        "The algorithm may not have converged.");
  }

  /** The mean row, then the draws, each with lp__ = 0, log_p__, log_g__. */
  void write_draws(const Q& q, Eigen::VectorXd& cont_params,
                   csv_writer& output) {
    std::vector<int> disc;
    std::vector<double> values;
    cont_params = q.mean();
    std::vector<double> cont(cont_params.data(),
                             cont_params.data() + cont_params.size());
    std::stringstream msg;
    ctx_.model.write_array(rng_, cont, disc, values, true, true, &msg);
    values.insert(values.begin(), {0, 0, 0});
    output(values);
    std::stringstream drawing;
    drawing << "Drawing a sample of size " << s_.output_samples
            << " from the approximate posterior... ";
    ctx_.logger.info(drawing);
    double log_g = 0;
    for (int n = 0; n < s_.output_samples; ++n) {
      q.sample_log_g(rng_, cont_params, log_g);
      std::copy(cont_params.data(), cont_params.data() + cont_params.size(),
                cont.begin());
      ctx_.model.write_array(rng_, cont, disc, values, true, true, &msg);
      double log_p
          = ctx_.model.template log_prob<false, true>(cont_params, &msg);
      values.insert(values.begin(), {0, log_p, log_g});
      output(values);
    }
    if (msg.str().length() > 0)
      ctx_.logger.info(msg);
    ctx_.logger.info("COMPLETED.");
  }

  run_context& ctx_;
  const advi_settings& s_;
  stan::rng_t rng_;
};

}  // namespace

int run_variational(run_context& ctx) {
  const config& cfg = ctx.cfg;
  const std::string base = "method/variational/";
  advi_settings s{cfg.list(base + "algorithm").chosen(),
                  static_cast<int>(cfg.integer(base + "grad_samples")),
                  static_cast<int>(cfg.integer(base + "elbo_samples")),
                  static_cast<int>(cfg.integer(base + "iter")),
                  static_cast<int>(cfg.integer(base + "adapt/iter")),
                  static_cast<int>(cfg.integer(base + "eval_elbo")),
                  static_cast<int>(cfg.integer(base + "output_samples")),
                  cfg.real(base + "tol_rel_obj"),
                  cfg.real(base + "eta"),
                  cfg.flag(base + "adapt/engaged"),
                  cfg.text(base + "checkpoint/load"),
                  cfg.text(base + "checkpoint/save")};
  csv_writer output = open_csv(ctx, cfg.text("output/file"), ctx.id);
  const std::string diagnostic = cfg.text("output/diagnostic_file");
  csv_writer diagnostics
      = diagnostic.empty() ? null_csv() : open_csv(ctx, diagnostic, ctx.id);
  bool fullrank = s.algorithm == "fullrank";
  if (!s.load.empty() || !s.save.empty()) {
    stan::services::util::experimental_message(ctx.logger);
    if (fullrank)
      return resumable_advi<variational::normal_fullrank>(ctx, s).run(
          output, diagnostics);
    return resumable_advi<variational::normal_meanfield>(ctx, s).run(
        output, diagnostics);
  }
  init_spec init = parse_init(cfg.text("init"));
  context_ptr values = read_var_context(init.file, ctx.logger);
  stan::callbacks::writer init_writer;
  namespace advi = stan::services::experimental::advi;
  if (fullrank)
    return advi::fullrank(ctx.model, *values, ctx.seed, ctx.id, init.radius,
                          s.grad_samples, s.elbo_samples, s.iter,
                          s.tol_rel_obj, s.eta, s.adapt, s.adapt_iter,
                          s.eval_elbo, s.output_samples, ctx.interrupt,
                          ctx.logger, init_writer, output, diagnostics);
  return advi::meanfield(ctx.model, *values, ctx.seed, ctx.id, init.radius,
                         s.grad_samples, s.elbo_samples, s.iter, s.tol_rel_obj,
                         s.eta, s.adapt, s.adapt_iter, s.eval_elbo,
                         s.output_samples, ctx.interrupt, ctx.logger,
                         init_writer, output, diagnostics);
}

}  // namespace stanflow
