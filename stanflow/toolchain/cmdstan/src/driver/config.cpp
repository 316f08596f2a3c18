#include "config.hpp"

#include <cstdlib>
#include <sstream>

namespace stanflow {

namespace {

using kind = value_argument::kind;
using check = value_argument::validator;

check int_at_least(long long lo) {
  return [lo](const value_argument& v) { return v.as_int() >= lo; };
}
check real_above(double lo) {
  return [lo](const value_argument& v) { return v.as_real() > lo; };
}
check real_at_least(double lo) {
  return [lo](const value_argument& v) { return v.as_real() >= lo; };
}

void add_int(category& c, const std::string& name, const std::string& help,
             const std::string& def, long long lo) {
  c.add<value_argument>(name, help, kind::integer, def,
                        " " + std::to_string(lo) + " <= " + name,
                        int_at_least(lo));
}
void add_positive_int(category& c, const std::string& name,
                      const std::string& help, const std::string& def) {
  c.add<value_argument>(name, help, kind::integer, def, " 0 < " + name,
                        int_at_least(1));
}
void add_positive_real(category& c, const std::string& name,
                       const std::string& help, const std::string& def) {
  c.add<value_argument>(name, help, kind::real, def, " 0 < " + name,
                        real_above(0));
}
void add_nonneg_real(category& c, const std::string& name,
                     const std::string& help, const std::string& def) {
  c.add<value_argument>(name, help, kind::real, def, " 0 <= " + name,
                        real_at_least(0));
}
void add_bool(category& c, const std::string& name, const std::string& help,
              const std::string& def) {
  c.add<value_argument>(name, help, kind::boolean, def, " [0, 1, false, true]",
                        nullptr);
}
void add_string(category& c, const std::string& name, const std::string& help,
                const std::string& def) {
  c.add<value_argument>(name, help, kind::string, def, " Path to existing file",
                        nullptr);
}

void add_bfgs_arguments(category& c) {
  add_positive_real(c, "init_alpha", "Line search step size for first iteration",
                    "0.001");
  add_nonneg_real(c, "tol_obj", "Convergence tolerance on absolute changes in objective function value", "1e-12");
  add_nonneg_real(c, "tol_rel_obj", "Convergence tolerance on relative changes in objective function value", "10000");
  add_nonneg_real(c, "tol_grad", "Convergence tolerance on the norm of the gradient", "1e-08");
  add_nonneg_real(c, "tol_rel_grad", "Convergence tolerance on the relative norm of the gradient", "1e+07");
  add_nonneg_real(c, "tol_param", "Convergence tolerance on changes in parameter value", "1e-08");
}

void add_sample(category& sample) {
  add_int(sample, "num_samples", "Number of sampling iterations", "1000", 0);
  add_int(sample, "num_warmup", "Number of warmup iterations", "1000", 0);
  add_bool(sample, "save_warmup", "Stream warmup samples to output?", "0");
  add_positive_int(sample, "thin", "Period between saved samples", "1");
  auto& adapt = sample.add<category>("adapt", "Warmup Adaptation");
  add_bool(adapt, "engaged", "Adaptation engaged?", "1");
  add_positive_real(adapt, "gamma", "Adaptation regularization scale", "0.05");
  adapt.add<value_argument>(
      "delta", "Adaptation target acceptance statistic", kind::real, "0.8",
      " 0 < delta < 1", [](const value_argument& v) {
        return v.as_real() > 0 && v.as_real() < 1;
      });
  add_positive_real(adapt, "kappa", "Adaptation relaxation exponent", "0.75");
  add_positive_real(adapt, "t0", "Adaptation iteration offset", "10");
  add_int(adapt, "init_buffer", "Width of initial fast adaptation interval",
          "75", 0);
  add_int(adapt, "term_buffer", "Width of final fast adaptation interval",
          "50", 0);
  add_int(adapt, "window", "Initial width of slow adaptation interval", "25",
          0);
  add_bool(adapt, "save_metric", "Save metric as JSON?", "0");
  auto& algorithm
      = sample.add<list_argument>("algorithm", "Sampling algorithm", "hmc");
  auto& hmc = algorithm.option("hmc", "Hamiltonian Monte Carlo");
  auto& engine = hmc.add<list_argument>("engine", "Engine for Hamiltonian Monte Carlo", "nuts");
  auto& nuts = engine.option("nuts", "The No-U-Turn Sampler");
  add_positive_int(nuts, "max_depth", "Maximum tree depth", "10");
  auto& stat = engine.option("static", "Static integration time");
  add_positive_real(stat, "int_time", "Total integration time for Hamiltonian evolution", "6.28319");
  auto& metric = hmc.add<list_argument>("metric", "Geometry of base manifold", "diag_e");
  metric.option("unit_e", "Euclidean manifold with unit metric");
  metric.option("diag_e", "Euclidean manifold with diag metric");
  metric.option("dense_e", "Euclidean manifold with dense metric");
  add_string(hmc, "metric_file", "Input file with precomputed Euclidean metric", "");
  add_positive_real(hmc, "stepsize", "Step size for discrete evolution", "1");
  hmc.add<value_argument>(
      "stepsize_jitter", "Uniformly random jitter of the stepsize, in percent",
      kind::real, "0", " 0 <= stepsize_jitter <= 1",
      [](const value_argument& v) {
        return v.as_real() >= 0 && v.as_real() <= 1;
      });
  algorithm.option("fixed_param", "Fixed Parameter Sampler");
  add_positive_int(sample, "num_chains", "Number of chains", "1");
}

void add_optimize(category& optimize) {
  auto& algorithm = optimize.add<list_argument>("algorithm", "Optimization algorithm", "lbfgs");
  add_bfgs_arguments(algorithm.option("bfgs", "BFGS with linesearch"));
  auto& lbfgs = algorithm.option("lbfgs", "LBFGS with linesearch");
  add_bfgs_arguments(lbfgs);
  add_positive_int(lbfgs, "history_size", "Amount of history to keep for L-BFGS", "5");
  algorithm.option("newton", "Newton's method");
  add_bool(optimize, "jacobian", "When true, include change-of-variables adjustment for constraining parameter transforms", "0");
  add_positive_int(optimize, "iter", "Total number of iterations", "2000");
  add_bool(optimize, "save_iterations", "Stream optimization progress to output?", "0");
}

void add_variational(category& variational) {
  auto& algorithm = variational.add<list_argument>("algorithm", "Variational inference algorithm", "meanfield");
  algorithm.option("meanfield", "mean-field approximation");
  algorithm.option("fullrank", "full-rank covariance");
  add_positive_int(variational, "iter", "Maximum number of ADVI iterations.", "10000");
  add_positive_int(variational, "grad_samples", "Number of Monte Carlo draws for computing the gradient.", "1");
  add_positive_int(variational, "elbo_samples", "Number of Monte Carlo draws for estimate of ELBO.", "100");
  add_positive_real(variational, "eta", "Stepsize scaling parameter.", "1");
  auto& adapt = variational.add<category>("adapt", "Eta Adaptation for Variational Inference");
  add_bool(adapt, "engaged", "Boolean flag for eta adaptation.", "1");
  add_positive_int(adapt, "iter", "Number of iterations for eta adaptation.", "50");
  add_positive_real(variational, "tol_rel_obj", "Relative tolerance parameter for convergence.", "0.01");
  add_positive_int(variational, "eval_elbo", "Number of iterations between ELBO evaluations", "100");
  add_int(variational, "output_samples", "Number of approximate posterior output draws to save.", "1000", 0);
  auto& checkpoint = variational.add<category>("checkpoint", "Resumable ADVI: save the optimiser's state, continue from a saved state");
  checkpoint.mark_extension();
  add_string(checkpoint, "load", "State file of an earlier run to continue from (skips initialisation and adaptation)", "");
  checkpoint.add<value_argument>("save", "File to write the state to after the last iteration", kind::string, "", " Path of the file to write", nullptr);
}

void add_pathfinder(category& pathfinder) {
  add_bfgs_arguments(pathfinder);
  add_positive_int(pathfinder, "history_size", "Amount of history to keep for L-BFGS", "5");
  add_positive_int(pathfinder, "num_psis_draws", "Number of draws from PSIS sample", "1000");
  add_positive_int(pathfinder, "num_paths", "Number of single pathfinders", "4");
  add_bool(pathfinder, "save_single_paths", "Output single-path pathfinder draws as CSV", "0");
  add_bool(pathfinder, "psis_resample", "If true, perform psis resampling on samples returned from individual pathfinders", "1");
  add_bool(pathfinder, "calculate_lp", "If true, individual pathfinders lp calculations are calculated and returned with the output", "1");
  add_positive_int(pathfinder, "max_lbfgs_iters", "Maximum number of LBFGS iterations", "1000");
  add_positive_int(pathfinder, "num_draws", "Number of approximate posterior draws", "1000");
  add_positive_int(pathfinder, "num_elbo_draws", "Number of Monte Carlo draws to evaluate ELBO", "25");
}

std::string default_num_threads(bool threaded) {
  if (!threaded)
    return "1";
  const char* env = std::getenv("STAN_NUM_THREADS");
  if (env == nullptr || *env == '\0')
    return "1";
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  if (*end != '\0' || (v < 1 && v != -1))
    throw argument_error(std::string("STAN_NUM_THREADS=") + env
                         + " is not a valid number of threads: it must be a "
                           "positive integer or -1");
  return env;
}

}  // namespace

config::config(bool threaded) : root_(std::make_unique<category>("", "")) {
  category& root = *root_;
  auto& method = root.add<list_argument>("method", "Analysis method", "sample");
  add_sample(method.option("sample", "Bayesian inference with Markov Chain Monte Carlo"));
  add_optimize(method.option("optimize", "Point estimation"));
  add_variational(method.option("variational", "Variational inference"));
  auto& diagnose = method.option("diagnose", "Model diagnostics");
  auto& test = diagnose.add<list_argument>("test", "Diagnostic test", "gradient");
  auto& gradient = test.option("gradient", "Check model gradient against finite differences");
  add_positive_real(gradient, "epsilon", "Finite difference step size", "1e-06");
  add_positive_real(gradient, "error", "Error threshold", "1e-06");
  auto& gq = method.option("generate_quantities", "Generate quantities of interest");
  add_string(gq, "fitted_params", "Input file of sample of fitted parameter values for model conditioned on data", "");
  add_positive_int(gq, "num_chains", "Number of chains", "1");
  auto& pathfinder = method.option("pathfinder", "Pathfinder algorithm");
  add_pathfinder(pathfinder);
  auto& log_prob = method.option("log_prob", "Return the log density up to a constant and its gradients, given supplied parameters");
  add_string(log_prob, "unconstrained_params", "Input file (JSON or R dump) of parameter values on unconstrained scale", "");
  add_string(log_prob, "constrained_params", "Input file (JSON or R dump) of parameter values on constrained scale", "");
  add_bool(log_prob, "jacobian", "When true, include change-of-variables adjustment for constraining parameter transforms", "1");
  auto& laplace = method.option("laplace", "Sample from a Laplace approximation");
  add_string(laplace, "mode", "A specification of a mode on the constrained scale for all model parameters, either in JSON or CSV format.", "");
  add_bool(laplace, "jacobian", "When true, include change-of-variables adjustment for constraining parameter transforms", "1");
  add_positive_int(laplace, "draws", "Number of draws from the laplace approximation", "1000");
  add_bool(laplace, "calculate_lp", "Whether to calculate the log probability of the approximate draws", "1");

  add_int(root, "id", "Unique process identifier", "1", 0);
  auto& data = root.add<category>("data", "Input data options");
  add_string(data, "file", "Input data file", "");
  root.add<value_argument>("init", "Initialization method: \"x\" initializes randomly between [-x, x], \"0\" initializes to 0, anything else identifies a file of values", kind::string, "2", " real number or path to file", nullptr);
  auto& random = root.add<category>("random", "Random number configuration");
  random.add<value_argument>(
      "seed", "Random number generator seed", kind::integer, "-1",
      " -1 <= seed <= 4294967295 (-1: seed from the clock)",
      [](const value_argument& v) {
        return v.as_int() >= -1 && v.as_int() <= 4294967295LL;
      });
  auto& output = root.add<category>("output", "File output options");
  add_string(output, "file", "Output file", "output.csv");
  add_string(output, "diagnostic_file", "Auxiliary output file for diagnostic information", "");
  add_int(output, "refresh", "Number of iterations between screen updates", "100", 0);
  output.add<value_argument>(
      "sig_figs", "The number of significant figures used for the output CSV files.",
      kind::integer, "-1", " -1 <= sig_figs <= 18", [](const value_argument& v) {
        return v.as_int() >= -1 && v.as_int() <= 18;
      });
  add_string(output, "profile_file", "File to store profiling information", "profile.csv");
  add_bool(output, "save_cmdstan_config", "Save cmdstan config as JSON?", "0");
  if (threaded) {
    root.add<value_argument>(
        "num_threads", "Number of threads available to the program.",
        kind::integer, default_num_threads(true), " num_threads > 0 || num_threads == -1",
        [](const value_argument& v) {
          return v.as_int() > 0 || v.as_int() == -1;
        });
  } else {
    root.add<value_argument>(
        "num_threads", "Number of threads available to the program (this executable was built without STAN_THREADS).",
        kind::integer, "1", " 1 (compile with STAN_THREADS for more)",
        [](const value_argument& v) { return v.as_int() == 1; });
  }
}

void config::parse(const std::vector<std::string>& tokens) {
  parse_tokens(*root_, tokens);
}

argument* config::find(const std::string& path) const {
  argument* node = root_.get();
  std::stringstream ss(path);
  std::string step;
  while (std::getline(ss, step, '/')) {
    if (auto* l = dynamic_cast<list_argument*>(node)) {
      if (l->chosen() != step)
        throw std::logic_error("option " + step + " of " + l->name()
                               + " is not chosen");
      node = &l->chosen_option();
      continue;
    }
    auto* c = dynamic_cast<category*>(node);
    node = c ? c->child(step) : nullptr;
    if (!node)
      throw std::logic_error("no argument " + path);
  }
  return node;
}

value_argument& config::value(const std::string& path) const {
  auto* v = dynamic_cast<value_argument*>(find(path));
  if (!v)
    throw std::logic_error(path + " is not a value");
  return *v;
}

list_argument& config::list(const std::string& path) const {
  auto* l = dynamic_cast<list_argument*>(find(path));
  if (!l)
    throw std::logic_error(path + " is not a list");
  return *l;
}

const std::string& config::method() const { return list("method").chosen(); }

std::vector<std::string> config::lines() const {
  std::vector<std::string> out;
  root_->print_children(out, 0);
  return out;
}

std::vector<std::string> config::help_lines() const {
  std::vector<std::string> out;
  for (const auto& c : root_->children())
    c->describe(out, 0);
  return out;
}

std::string config::json() const {
  std::string out;
  root_->to_json(out);
  return out;
}

}  // namespace stanflow
