package cluster

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TokenKubeconfig writes a kubeconfig at path that reaches this API server
// with a bearer token (a ServiceAccount's, as a Pod has it mounted).
func (c *Cluster) TokenKubeconfig(path, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeconfig"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["nodeconfig"] = &clientcmdapi.Context{Cluster: "nodeconfig", AuthInfo: "token"}
	cfg.CurrentContext = "nodeconfig"
	return clientcmd.WriteToFile(*cfg, path)
}
