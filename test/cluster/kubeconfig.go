package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountTokenTTL is the lifetime requested for service-account tokens.
const ServiceAccountTokenTTL = 3600 // seconds

// WriteKubeconfig writes a kubeconfig that reaches this control plane with
// the given bearer token and returns its path (in WorkDir/kubeconfigs). The CA
// is embedded, so the file works on its own, e.g. as $KUBECONFIG.
func (c *ControlPlane) WriteKubeconfig(name, token string) (string, error) {
	return c.writeKubeconfig(name, token, "")
}

// ServiceAccountKubeconfig creates the namespace and ServiceAccount if they do
// not exist, gets a token for it with the TokenRequest API (valid 1 h) and
// writes a kubeconfig whose context defaults to that namespace. The account
// gets no RBAC permissions: callers grant what the test needs.
func (c *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	cs := c.AdminClient()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	ttl := int64(ServiceAccountTokenTTL)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return c.writeKubeconfig("sa-"+namespace+"-"+name, tr.Status.Token, namespace)
}

// unsafeFileChars are replaced in kubeconfig file names.
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func (c *ControlPlane) writeKubeconfig(name, token, namespace string) (string, error) {
	const cluster = "leader-elector-test"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{
		Server:                   c.Host(),
		CertificateAuthorityData: c.pki.caPEM,
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = name

	path := filepath.Join(c.opts.WorkDir, "kubeconfigs", unsafeFileChars.ReplaceAllString(name, "_")+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}
