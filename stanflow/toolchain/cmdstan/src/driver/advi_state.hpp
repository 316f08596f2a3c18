// The state of an ADVI optimisation that stanflow's checkpoint extension
// saves and continues from: the variational parameters, the step-size
// sequence's squared-gradient history and iteration count, eta and the RNG.
#ifndef STANFLOW_DRIVER_ADVI_STATE_HPP
#define STANFLOW_DRIVER_ADVI_STATE_HPP

#include <stan/math/prim/fun/Eigen.hpp>

#include <optional>
#include <string>

namespace stanflow {

/**
 * Everything that determines how an ADVI run goes on from its last
 * iteration. `scale` and `history_scale` are omega (D x 1) for mean-field and
 * the Cholesky factor L (D x D) for full-rank.
 */
struct advi_state {
  std::string algorithm;  // "meanfield" or "fullrank"
  std::string model;      // model name, checked on load
  long long iteration = 0;
  double eta = 0;
  Eigen::VectorXd mu;
  Eigen::MatrixXd scale;
  Eigen::VectorXd history_mu;
  Eigen::MatrixXd history_scale;
  std::optional<double> elbo;  // at the last ELBO evaluation, if any
  std::string rng;             // the RNG's state as its stream operator writes it
};

/** Write `state` as JSON, every double with 17 significant digits. */
void write_advi_state(std::ostream& out, const advi_state& state);

/**
 * Read a state written by `write_advi_state`; throws std::invalid_argument
 * naming the file and the field that is missing or malformed.
 */
advi_state read_advi_state(const std::string& path);

}  // namespace stanflow
#endif
