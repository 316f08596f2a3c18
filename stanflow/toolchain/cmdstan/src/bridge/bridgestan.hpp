// The C API of BridgeStan 2.9, implemented by stanflow on stan::model.
//
// Written from BridgeStan's public documentation of its C interface: the
// Python package `bridgestan` loads any shared object that exports these
// symbols. Every function that can fail returns 0 on success and non-zero on
// failure, and then, if `error_msg` is not null, points it at a message that
// the caller frees with bs_free_error_msg.
#ifndef STANFLOW_BRIDGE_BRIDGESTAN_HPP
#define STANFLOW_BRIDGE_BRIDGESTAN_HPP

#include <cstddef>

extern "C" {

typedef struct bs_model bs_model;
typedef struct bs_rng bs_rng;
typedef void (*STREAM_CALLBACK)(const char* data, size_t size);

extern int bs_major_version;
extern int bs_minor_version;
extern int bs_patch_version;

bs_model* bs_model_construct(const char* data, unsigned int seed,
                             char** error_msg);
void bs_model_destruct(bs_model* m);
void bs_free_error_msg(char* error_msg);

const char* bs_name(const bs_model* m);
const char* bs_model_info(const bs_model* m);
const char* bs_param_names(const bs_model* m, bool include_tp,
                           bool include_gq);
const char* bs_param_unc_names(const bs_model* m);
int bs_param_num(const bs_model* m, bool include_tp, bool include_gq);
int bs_param_unc_num(const bs_model* m);

int bs_param_constrain(const bs_model* m, bool include_tp, bool include_gq,
                       const double* theta_unc, double* theta, bs_rng* rng,
                       char** error_msg);
int bs_param_unconstrain(const bs_model* m, const double* theta,
                         double* theta_unc, char** error_msg);
int bs_param_unconstrain_json(const bs_model* m, const char* json,
                              double* theta_unc, char** error_msg);
int bs_param_initialize(const bs_model* m, const char* json, bs_rng* rng,
                        double init_radius, int max_tries, bool jacobian,
                        double* theta_unc, char** error_msg);

int bs_log_density(const bs_model* m, bool propto, bool jacobian,
                   const double* theta_unc, double* lp, char** error_msg);
int bs_log_density_gradient(const bs_model* m, bool propto, bool jacobian,
                            const double* theta_unc, double* lp, double* grad,
                            char** error_msg);
int bs_log_density_hessian(const bs_model* m, bool propto, bool jacobian,
                           const double* theta_unc, double* lp, double* grad,
                           double* hessian, char** error_msg);
int bs_log_density_hessian_vector_product(const bs_model* m, bool propto,
                                          bool jacobian,
                                          const double* theta_unc,
                                          const double* vector, double* lp,
                                          double* hvp, char** error_msg);

bs_rng* bs_rng_construct(unsigned int seed, char** error_msg);
void bs_rng_destruct(bs_rng* rng);

int bs_set_print_callback(STREAM_CALLBACK callback, char** error_msg);

// stanflow's extension (not in BridgeStan): the log density, and optionally
// its gradient, of `n` points at once, rows of the row-major (n, D) array
// `theta_unc`, split over `threads` threads (0: one per hardware thread).
// `lp` has n entries; `grad`, if not null, n * D. A row whose evaluation
// throws std::domain_error (a rejection, a failed check) gets lp = -inf and a
// NaN gradient when `reject_as_neg_inf`, as Stan's samplers treat it;
// otherwise, and for any other exception, the call fails naming the row.
int stanflow_log_density_batch(const bs_model* m, bool propto, bool jacobian,
                               int n, const double* theta_unc, double* lp,
                               double* grad, int threads,
                               bool reject_as_neg_inf, char** error_msg);

}  // extern "C"

#endif
