// Bayesian logistic regression, the target of the q-path SMC experiments
// (stanflow.qpaths.logistic): labels y in {-1, +1}, prior z ~ N(0, prior_sd^2 I),
//   log pi1(z) = normal_lpdf(z | 0, prior_sd) + sum_i log_inv_logit(y_i x_i' z),
// so that Z = p(y) when evaluated with every constant (propto = false).
data {
  int<lower=1> n;
  int<lower=1> d;
  matrix[n, d] X;
  vector<lower=-1, upper=1>[n] y;
  real<lower=0> prior_sd;
}
parameters {
  vector[d] z;
}
model {
  target += normal_lpdf(z | 0, prior_sd);
  target += sum(log_inv_logit(y .* (X * z)));
}
