#!/usr/bin/env bash
# Makes a throwaway CA and one certificate signed by it for every sparseserve process: TLS on the
# public ports and mutual TLS between router and workers (docs/deploy.md, "TLS and API keys").
# For tests and demos; a production cluster takes its certificates from its own CA (cert-manager).
#   scripts/make_dev_certs.sh OUT_DIR [NAMESPACE]
# Writes OUT_DIR/ca.crt, ca.key, tls.crt, tls.key. The certificate names the Services of the
# k8s base (sparseserve-router, -prefill, -decode; short, namespaced and cluster-local forms),
# localhost and 127.0.0.1, and is valid for 30 days. Prints the kubectl commands that load it.
set -euo pipefail
out=${1:?usage: make_dev_certs.sh OUT_DIR [NAMESPACE]}
ns=${2:-sparseserve}
mkdir -p "$out"
cd "$out"
san="IP:127.0.0.1,DNS:localhost"
for svc in sparseserve-router sparseserve-prefill sparseserve-decode; do
  san+=",DNS:$svc,DNS:$svc.$ns,DNS:$svc.$ns.svc,DNS:$svc.$ns.svc.cluster.local"
done
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
  -subj "/CN=sparseserve dev CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/CN=sparseserve" \
  2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 30 \
  -extfile tls.ext 2>/dev/null
rm -f tls.csr tls.ext ca.srl
chmod 600 ca.key tls.key
echo "make_dev_certs: $out/{ca.crt,tls.crt,tls.key} for namespace $ns. Load them with:"
echo "  kubectl -n $ns create secret generic sparseserve-tls --from-file=$out/tls.crt \\"
echo "      --from-file=$out/tls.key --from-file=$out/ca.crt"
echo "  kubectl -n $ns create secret generic sparseserve-api-keys --from-file=keys=KEYS_FILE"
