// q-path between a base and a target density (Brekelmans et al. 2020):
//   log pi_{beta,q}(z) = (1/(1-q)) log((1-beta) pi0(z)^(1-q) + beta pi1(z)^(1-q)),
// the geometric path (1-beta) log pi0 + beta log pi1 exactly at q = 1.
// Slots (stanflow.models, docs/templates.md):
//   base.stanfunctions:   real log_base(vector z, vector base_params)
//   target.stanfunctions: real log_target(vector z, vector target_params)
// generated quantities: the TI integrand d/dbeta log pi_{beta,q}(z).
functions {
  #include base.stanfunctions
  #include target.stanfunctions
  
  #include qpath.stanfunctions
}
data {
  int<lower=1> d;
  real<lower=0, upper=1> beta;
  real q;
  int<lower=0> n_base_params;
  vector[n_base_params] base_params;
  int<lower=0> n_target_params;
  vector[n_target_params] target_params;
}
parameters {
  vector[d] z;
}
transformed parameters {
  real log_pi0 = log_base(z, base_params);
  real log_pi1 = log_target(z, target_params);
}
model {
  target += log_qpath(log_pi0, log_pi1, beta, q);
}
generated quantities {
  real ti_integrand = dlog_qpath_dbeta(log_pi0, log_pi1, beta, q);
}
