// stanflow's implementation of the BridgeStan 2.9 C API (bridgestan.hpp) on
// stan::model::model_base. Compiled once per installation (position
// independent, threaded) and linked with each model's object into a shared
// library; the model's translation unit supplies `new_model`.
#include "bridgestan.hpp"

#include <stan/io/chained_var_context.hpp>
#include <stan/io/empty_var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/io/random_var_context.hpp>
#include <stan/math/rev.hpp>
#include <stan/math/rev/functor/finite_diff_hessian_auto.hpp>
#include <stan/model/model_base.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/version.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

// Defined by the model's translation unit (stanc's output).
stan::model::model_base& new_model(stan::io::var_context& data_context,
                                   unsigned int seed, std::ostream* msg_stream);

namespace {

using vector_d = Eigen::VectorXd;
using vector_v = Eigen::Matrix<stan::math::var, Eigen::Dynamic, 1>;

/** Stream buffer handing complete lines (or flushed text) to a C callback. */
class callback_buffer : public std::streambuf {
 public:
  explicit callback_buffer(STREAM_CALLBACK callback) : callback_(callback) {}

 protected:
  int overflow(int c) override {
    if (c != EOF) {
      std::lock_guard<std::mutex> guard(mutex_);
      pending_.push_back(static_cast<char>(c));
    }
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> guard(mutex_);
    pending_.append(s, static_cast<size_t>(n));
    return n;
  }
  int sync() override {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!pending_.empty()) {
      callback_(pending_.data(), pending_.size());
      pending_.clear();
    }
    return 0;
  }

 private:
  STREAM_CALLBACK callback_;
  std::string pending_;
  std::mutex mutex_;
};

std::unique_ptr<callback_buffer> print_buffer;
std::unique_ptr<std::ostream> print_stream;
std::ostream* outstream = &std::cout;

void set_error(char** error_msg, const std::string& message) {
  if (error_msg != nullptr)
    *error_msg = strdup(message.c_str());
}

/**
 * Run `body`, turning any exception into a return code of -1 and a message
 * `<function>: <what>` for the caller.
 */
template <typename F>
int guarded(const char* function, char** error_msg, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string(function) + ": " + e.what());
  } catch (...) {
    set_error(error_msg, std::string(function) + ": unknown C++ exception");
  }
  return -1;
}

/** The autodiff stack of the calling thread, made on its first use. */
void ensure_autodiff_stack() {
  static thread_local stan::math::ChainableStack stack;
  (void)stack;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      out += ',';
    out += names[i];
  }
  return out;
}

std::shared_ptr<stan::io::var_context> json_context(const char* json) {
  if (json == nullptr || json[0] == '\0')
    return std::make_shared<stan::io::empty_var_context>();
  std::stringstream in(json);
  return std::make_shared<stan::json::json_data>(in);
}

template <typename T>
T dispatch_log_prob(const stan::model::model_base& model, bool propto,
                    bool jacobian, Eigen::Matrix<T, Eigen::Dynamic, 1>& x) {
  if (propto)
    return jacobian ? model.log_prob_propto_jacobian(x, outstream)
                    : model.log_prob_propto(x, outstream);
  return jacobian ? model.log_prob_jacobian(x, outstream)
                  : model.log_prob(x, outstream);
}

/** The log density as a functor of autodiff variables, for Stan's functionals. */
struct log_density_functor {
  const stan::model::model_base& model;
  bool propto;
  bool jacobian;
  stan::math::var operator()(const vector_v& x) const {
    vector_v y = x;
    return dispatch_log_prob(model, propto, jacobian, y);
  }
};

}  // namespace

struct bs_model {
  std::unique_ptr<stan::model::model_base> model;
  std::string name;
  std::string info;
  std::string unc_names;
  std::string names[2][2];  // [include_tp][include_gq]
  int counts[2][2];
  int unc_num;
};

struct bs_rng {
  explicit bs_rng(unsigned int seed)
      : rng(stan::services::util::create_rng(seed, 1)) {}
  stan::rng_t rng;
};

extern "C" {

bs_model* bs_model_construct(const char* data, unsigned int seed,
                             char** error_msg) {
  bs_model* result = nullptr;
  guarded("bs_model_construct", error_msg, [&] {
    auto context = json_context(data);
    auto out = std::make_unique<bs_model>();
    out->model.reset(&new_model(*context, seed, outstream));
    const auto& model = *out->model;
    out->name = model.model_name();
    std::ostringstream info;
    info << "stanflow's BridgeStan-compatible library (C API "
         << bs_major_version << "." << bs_minor_version << "."
         << bs_patch_version << ")\n"
         << "Stan version: " << stan::MAJOR_VERSION << "."
         << stan::MINOR_VERSION << "." << stan::PATCH_VERSION << "\n"
         << "Stan C++ defines: STAN_THREADS=true\n"
         << "Hessian: finite differences of autodiff gradients\n";
    for (const auto& line : model.model_compile_info())
      info << line << "\n";
    out->info = info.str();
    std::vector<std::string> names;
    model.unconstrained_param_names(names, false, false);
    out->unc_names = join(names);
    out->unc_num = static_cast<int>(model.num_params_r());
    for (int tp = 0; tp < 2; ++tp)
      for (int gq = 0; gq < 2; ++gq) {
        names.clear();
        model.constrained_param_names(names, tp == 1, gq == 1);
        out->names[tp][gq] = join(names);
        out->counts[tp][gq] = static_cast<int>(names.size());
      }
    result = out.release();
  });
  return result;
}

void bs_model_destruct(bs_model* m) { delete m; }

void bs_free_error_msg(char* error_msg) { free(error_msg); }

const char* bs_name(const bs_model* m) { return m->name.c_str(); }

const char* bs_model_info(const bs_model* m) { return m->info.c_str(); }

const char* bs_param_names(const bs_model* m, bool include_tp,
                           bool include_gq) {
  return m->names[include_tp][include_gq].c_str();
}

const char* bs_param_unc_names(const bs_model* m) {
  return m->unc_names.c_str();
}

int bs_param_num(const bs_model* m, bool include_tp, bool include_gq) {
  return m->counts[include_tp][include_gq];
}

int bs_param_unc_num(const bs_model* m) { return m->unc_num; }

int bs_param_constrain(const bs_model* m, bool include_tp, bool include_gq,
                       const double* theta_unc, double* theta, bs_rng* rng,
                       char** error_msg) {
  return guarded("bs_param_constrain", error_msg, [&] {
    if (include_gq && rng == nullptr)
      throw std::invalid_argument(
          "an RNG is required when generated quantities are included");
    static thread_local bs_rng unused(0);  // write_array needs one even without gq
    vector_d params = Eigen::Map<const vector_d>(theta_unc, m->unc_num);
    vector_d values;
    m->model->write_array(rng == nullptr ? unused.rng : rng->rng, params,
                          values, include_tp, include_gq, outstream);
    Eigen::Map<vector_d>(theta, values.size()) = values;
  });
}

int bs_param_unconstrain(const bs_model* m, const double* theta,
                         double* theta_unc, char** error_msg) {
  return guarded("bs_param_unconstrain", error_msg, [&] {
    vector_d constrained
        = Eigen::Map<const vector_d>(theta, m->counts[0][0]);
    vector_d unconstrained(m->unc_num);
    m->model->unconstrain_array(constrained, unconstrained, outstream);
    Eigen::Map<vector_d>(theta_unc, m->unc_num) = unconstrained;
  });
}

int bs_param_unconstrain_json(const bs_model* m, const char* json,
                              double* theta_unc, char** error_msg) {
  return guarded("bs_param_unconstrain_json", error_msg, [&] {
    auto context = json_context(json);
    vector_d unconstrained(m->unc_num);
    m->model->transform_inits(*context, unconstrained, outstream);
    Eigen::Map<vector_d>(theta_unc, m->unc_num) = unconstrained;
  });
}

int bs_param_initialize(const bs_model* m, const char* json, bs_rng* rng,
                        double init_radius, int max_tries, bool jacobian,
                        double* theta_unc, char** error_msg) {
  return guarded("bs_param_initialize", error_msg, [&] {
    if (rng == nullptr)
      throw std::invalid_argument("an RNG is required");
    if (!(init_radius >= 0) || !std::isfinite(init_radius))
      throw std::invalid_argument("init_radius must be finite and >= 0");
    if (max_tries < 1)
      throw std::invalid_argument("max_tries must be >= 1");
    ensure_autodiff_stack();
    auto given = json_context(json);
    const log_density_functor f{*m->model, true, jacobian};
    std::string last_error = "the log density or its gradient is not finite";
    for (int attempt = 0; attempt < max_tries; ++attempt) {
      stan::io::random_var_context random(*m->model, rng->rng, init_radius,
                                          init_radius == 0);
      stan::io::chained_var_context context(*given, random);
      vector_d unconstrained(m->unc_num);
      m->model->transform_inits(context, unconstrained, outstream);
      double lp;
      vector_d grad;
      try {
        stan::math::gradient(f, unconstrained, lp, grad);
      } catch (const std::domain_error& e) {
        last_error = e.what();
        continue;
      }
      if (std::isfinite(lp) && grad.allFinite()) {
        Eigen::Map<vector_d>(theta_unc, m->unc_num) = unconstrained;
        return;
      }
    }
    throw std::domain_error("no initial point in " + std::to_string(max_tries)
                            + " tries; last problem: " + last_error);
  });
}

int bs_log_density(const bs_model* m, bool propto, bool jacobian,
                   const double* theta_unc, double* lp, char** error_msg) {
  return guarded("bs_log_density", error_msg, [&] {
    if (!propto) {  // with doubles, `propto` would drop every term
      vector_d x = Eigen::Map<const vector_d>(theta_unc, m->unc_num);
      *lp = dispatch_log_prob(*m->model, false, jacobian, x);
      return;
    }
    ensure_autodiff_stack();
    stan::math::nested_rev_autodiff nested;
    vector_v x = Eigen::Map<const vector_d>(theta_unc, m->unc_num);
    *lp = dispatch_log_prob(*m->model, true, jacobian, x).val();
  });
}

int bs_log_density_gradient(const bs_model* m, bool propto, bool jacobian,
                            const double* theta_unc, double* lp, double* grad,
                            char** error_msg) {
  return guarded("bs_log_density_gradient", error_msg, [&] {
    ensure_autodiff_stack();
    const vector_d x = Eigen::Map<const vector_d>(theta_unc, m->unc_num);
    vector_d g;
    stan::math::gradient(log_density_functor{*m->model, propto, jacobian}, x,
                         *lp, g);
    Eigen::Map<vector_d>(grad, m->unc_num) = g;
  });
}

int bs_log_density_hessian(const bs_model* m, bool propto, bool jacobian,
                           const double* theta_unc, double* lp, double* grad,
                           double* hessian, char** error_msg) {
  return guarded("bs_log_density_hessian", error_msg, [&] {
    ensure_autodiff_stack();
    const vector_d x = Eigen::Map<const vector_d>(theta_unc, m->unc_num);
    vector_d g;
    Eigen::MatrixXd h;
    stan::math::internal::finite_diff_hessian_auto(
        log_density_functor{*m->model, propto, jacobian}, x, *lp, g, h);
    Eigen::Map<vector_d>(grad, m->unc_num) = g;
    Eigen::Map<Eigen::MatrixXd>(hessian, m->unc_num, m->unc_num) = h;
  });
}

int bs_log_density_hessian_vector_product(const bs_model* m, bool propto,
                                          bool jacobian,
                                          const double* theta_unc,
                                          const double* vector, double* lp,
                                          double* hvp, char** error_msg) {
  return guarded("bs_log_density_hessian_vector_product", error_msg, [&] {
    ensure_autodiff_stack();
    const int d = m->unc_num;
    const vector_d x = Eigen::Map<const vector_d>(theta_unc, d);
    const vector_d v = Eigen::Map<const vector_d>(vector, d);
    const log_density_functor f{*m->model, propto, jacobian};
    vector_d g;
    stan::math::gradient(f, x, *lp, g);
    const double norm = v.norm();
    if (norm == 0) {
      Eigen::Map<vector_d>(hvp, d).setZero();
      return;
    }
    // Central difference of gradients along v, with the step that balances
    // truncation (step^2) against rounding (1 / step): cbrt(machine epsilon).
    const double step = std::cbrt(std::numeric_limits<double>::epsilon())
                        * (1 + x.norm()) / norm;
    double unused;
    vector_d forward, backward;
    stan::math::gradient(f, vector_d(x + step * v), unused, forward);
    stan::math::gradient(f, vector_d(x - step * v), unused, backward);
    Eigen::Map<vector_d>(hvp, d) = (forward - backward) / (2 * step);
  });
}

bs_rng* bs_rng_construct(unsigned int seed, char** error_msg) {
  bs_rng* result = nullptr;
  guarded("bs_rng_construct", error_msg,
          [&] { result = new bs_rng(seed); });
  return result;
}

void bs_rng_destruct(bs_rng* rng) { delete rng; }

int bs_set_print_callback(STREAM_CALLBACK callback, char** error_msg) {
  return guarded("bs_set_print_callback", error_msg, [&] {
    if (callback == nullptr) {
      outstream = &std::cout;
      print_stream.reset();
      print_buffer.reset();
      return;
    }
    auto buffer = std::make_unique<callback_buffer>(callback);
    auto stream = std::make_unique<std::ostream>(buffer.get());
    outstream = stream.get();
    print_stream = std::move(stream);
    print_buffer = std::move(buffer);
  });
}

int stanflow_log_density_batch(const bs_model* m, bool propto, bool jacobian,
                               int n, const double* theta_unc, double* lp,
                               double* grad, int threads,
                               bool reject_as_neg_inf, char** error_msg) {
  return guarded("stanflow_log_density_batch", error_msg, [&] {
    if (n < 0)
      throw std::invalid_argument("n must be >= 0");
    const int d = m->unc_num;
    int workers = threads > 0 ? threads
                              : static_cast<int>(std::thread::hardware_concurrency());
    workers = std::max(1, std::min(workers, n));
    std::vector<std::string> failures(workers);
    std::vector<int> failed_rows(workers, -1);
    auto work = [&](int worker) {
      ensure_autodiff_stack();
      const log_density_functor f{*m->model, propto, jacobian};
      const int begin = static_cast<int>(static_cast<long>(n) * worker / workers);
      const int end = static_cast<int>(static_cast<long>(n) * (worker + 1) / workers);
      vector_d g;
      for (int row = begin; row < end; ++row) {
        const double* x_ptr = theta_unc + static_cast<long>(row) * d;
        try {
          if (grad != nullptr) {
            stan::math::gradient(f, vector_d(Eigen::Map<const vector_d>(x_ptr, d)),
                                 lp[row], g);
            Eigen::Map<vector_d>(grad + static_cast<long>(row) * d, d) = g;
          } else if (propto) {
            stan::math::nested_rev_autodiff nested;
            vector_v x = Eigen::Map<const vector_d>(x_ptr, d);
            lp[row] = dispatch_log_prob(*m->model, true, jacobian, x).val();
          } else {
            vector_d x = Eigen::Map<const vector_d>(x_ptr, d);
            lp[row] = dispatch_log_prob(*m->model, false, jacobian, x);
          }
        } catch (const std::domain_error& e) {
          if (!reject_as_neg_inf) {
            failed_rows[worker] = row;
            failures[worker] = e.what();
            return;
          }
          lp[row] = -std::numeric_limits<double>::infinity();
          if (grad != nullptr)
            Eigen::Map<vector_d>(grad + static_cast<long>(row) * d, d)
                .setConstant(std::numeric_limits<double>::quiet_NaN());
        } catch (const std::exception& e) {
          failed_rows[worker] = row;
          failures[worker] = e.what();
          return;
        }
      }
    };
    if (workers == 1) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (int w = 0; w < workers; ++w)
        pool.emplace_back(work, w);
      for (auto& t : pool)
        t.join();
    }
    for (int w = 0; w < workers; ++w)
      if (failed_rows[w] >= 0)
        throw std::domain_error("row " + std::to_string(failed_rows[w]) + ": "
                                + failures[w]);
  });
}

}  // extern "C"
