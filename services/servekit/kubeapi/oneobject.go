package kubeapi

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// OneObject lists and watches, through list and watchFrom, only the object
// named name: an informer of one object asks for no more than it needs
// (least privilege, least traffic).
func OneObject[L runtime.Object](name string,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error),
) *cache.ListWatch {
	only := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = only
			return list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = only
			return watchFrom(ctx, opts)
		},
	}
}
