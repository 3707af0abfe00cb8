package proxy

import "context"

func contextWithRoute(ctx context.Context, info *routeInfo) context.Context {
	return context.WithValue(ctx, ctxKey{}, info)
}

func routeFromContext(ctx context.Context) *routeInfo {
	if info, ok := ctx.Value(ctxKey{}).(*routeInfo); ok {
		return info
	}
	return &routeInfo{}
}
