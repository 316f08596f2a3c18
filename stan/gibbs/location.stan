// Gibbs posterior for a location parameter theta (median, quantile, mean, ...):
//   target += -omega * sum_i loss(y[i], theta, loss_params)
//             + log_prior([theta]', prior_params)
// with theta in [lower_bound, upper_bound]. With save_pointwise_loss = 1 the
// losses loss(y[i], f_i) of every draw are saved (importance reweighting of
// bootstrap resamples and learning rates, stanflow.gibbs.reweighting). Slots (docs/gibbs.md):
//   loss.stanfunctions:  real loss(real y, real f, vector loss_params)
//   prior.stanfunctions: real log_prior(vector theta, vector prior_params)
functions {
  #include loss.stanfunctions
  #include prior.stanfunctions
}
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=0> n_prior_params;
  vector[n_prior_params] prior_params;
  int<lower=0, upper=1> save_pointwise_loss;
  real lower_bound;
  real<lower=lower_bound> upper_bound;
}
parameters {
  real<lower=lower_bound, upper=upper_bound> theta;
}
model {
  real total_loss = 0;
  for (i in 1 : N) {
    total_loss += loss(y[i], theta, loss_params);
  }
  target += -omega * total_loss + log_prior([theta]', prior_params);
}
generated quantities {
  vector[save_pointwise_loss ? N : 0] pointwise_loss;
  if (save_pointwise_loss) {
    for (i in 1 : N) {
      pointwise_loss[i] = loss(y[i], theta, loss_params);
    }
  }
}
